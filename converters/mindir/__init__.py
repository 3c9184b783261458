"""MindIR (.mindir, MindSpore's protobuf export format) -> Lite IR. Needs `protobuf`."""

from converters.mindir.importer import MindirImportReport, import_mindir

__all__ = ["MindirImportReport", "import_mindir"]
