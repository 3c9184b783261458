"""The MindSpore Lite model format (.ms): schema, IR, reader and writer."""
