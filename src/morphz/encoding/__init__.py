"""The Context Encoding: the bounded, canonical, cache-friendly text a model request evaluates."""

from morphz.encoding.compile import EncodeOptions, Encoding, Region, compile_encoding
from morphz.encoding.delta import DeltaEncoder
from morphz.encoding.prefix import PrefixMeter, common_prefix
from morphz.encoding.tokens import Calibration, estimate_tokens

__all__ = [
    "Calibration",
    "DeltaEncoder",
    "EncodeOptions",
    "Encoding",
    "PrefixMeter",
    "Region",
    "common_prefix",
    "compile_encoding",
    "estimate_tokens",
]
