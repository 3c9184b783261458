"""The onnxruntime plugin execution provider: the only package that knows the ORT C ABI.

Identity of the provider, shared by its modules (see DESIGN.md, "Packages and rooms").
"""

EP_NAME = "NPUExecutionProvider"
VENDOR = "litenpu"
VENDOR_ID = 0x4C4E  # "LN": tells our OrtDevice apart from other vendors' NPUs
DEVICE_NAME = "sim"  # the reference NPU in provider.npu
CONFIG_PREFIX = f"ep.{EP_NAME.lower()}."  # how onnxruntime hands provider options to CreateEp
