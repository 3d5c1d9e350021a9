"""cdmpp in TVM's meta_schedule tuner: `cost_model()` scores candidates with a cdmpp estimator
(`cdmpp.tune.cost_model`); `builder()` compiles them in forked children with a time limit
(`cdmpp.tune.builder`); `runner()` times them with the device's threads (`cdmpp.tune.runner`).
Importing this package imports no TVM."""

from cdmpp.tune.builder import builder
from cdmpp.tune.cost_model import CandidateScorer, cost_model
from cdmpp.tune.runner import runner

__all__ = ["CandidateScorer", "builder", "cost_model", "runner"]
