"""The Context Encoding: the bounded, canonical, cache-friendly text a model request evaluates."""

from morphz.encoding.blocks import CacheLayout, PlainLayouts, encoding_layout
from morphz.encoding.compile import Encoding, Region, compile_encoding
from morphz.encoding.delta import DeltaEncoder
from morphz.encoding.options import EncodeOptions
from morphz.encoding.prefix import BlockCacheMeter, PrefixMeter, common_prefix
from morphz.encoding.tokens import Calibration, estimate_tokens
from morphz.encoding.view import View

__all__ = [
    "BlockCacheMeter",
    "CacheLayout",
    "Calibration",
    "DeltaEncoder",
    "EncodeOptions",
    "Encoding",
    "PlainLayouts",
    "PrefixMeter",
    "Region",
    "View",
    "common_prefix",
    "compile_encoding",
    "encoding_layout",
    "estimate_tokens",
]
