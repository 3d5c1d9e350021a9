"""cdmpp: predict the latency of tensor programs and whole networks without running them.

Importing the package does no heavy work: TVM, torch and xgboost are imported lazily by the
functions that need them.
"""

__version__ = "0.1.0"

from cdmpp.api import load_model, predict_network, predict_programs  # noqa: E402  (light)

__all__ = ["load_model", "predict_network", "predict_programs"]
