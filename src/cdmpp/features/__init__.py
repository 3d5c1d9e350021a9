"""Compact-AST features of tensor programs (CDMPP). Importing this package does not import TVM."""

from cdmpp.features.compact_ast import FEATURE_VERSION, N_LEAF_FEATURES, CompactAST, extract
from cdmpp.features.matching import FeatureMatchError
from cdmpp.features.parallel import extract_each

__all__ = ["FEATURE_VERSION", "N_LEAF_FEATURES", "CompactAST", "FeatureMatchError", "extract",
           "extract_each"]
