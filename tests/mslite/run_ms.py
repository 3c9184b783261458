"""Run a .ms model with the real MindSpore Lite runtime (Python 3.7, mindspore_lite 2.0).

Usage: run_ms.py MODEL.ms INPUTS.npz OUTPUTS.npz
Inputs are matched to the model's inputs by name (the model is resized to their shapes when
they differ, e.g. for a dynamic batch); outputs are saved under their names.
Run it from the model's folder: MindSpore Lite 2.0 resolves external weight files
(`.msw`) against the working directory, not the model's location.
Kept Python 3.7 compatible (no walrus, no f-string '=').
"""

import sys

import mindspore_lite as mslite
import numpy as np


def main(model_path, inputs_path, outputs_path):
    context = mslite.Context()
    context.target = ["cpu"]
    model = mslite.Model()
    model.build_from_file(model_path, mslite.ModelType.MINDIR_LITE, context)
    feeds = np.load(inputs_path)
    inputs = model.get_inputs()
    shapes = [list(feeds[tensor.name].shape) for tensor in inputs]
    if shapes != [list(tensor.shape) for tensor in inputs]:  # dynamic dims: size them first
        model.resize(inputs, shapes)
    for tensor in inputs:
        tensor.set_data_from_numpy(np.ascontiguousarray(feeds[tensor.name]))
    outputs = model.predict(inputs)
    np.savez(outputs_path, **{t.name: t.get_data_to_numpy() for t in outputs})
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
