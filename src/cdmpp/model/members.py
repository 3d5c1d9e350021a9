"""The CDMPP models an estimator is made of (calibration fine-tunes them; their embeddings
choose tasks and place programs)."""

from __future__ import annotations


def cdmpp_members(model, name, purpose: str = "calibrate fine-tunes CDMPP models") -> list:
    """The CDMPP models `model` is made of: itself, or the members of an ensemble of them
    (e.g. the shipped default, three seeds), under a default-program expert if it has one
    (`model.default_expert`; the expert itself is not one of them). `name` and `purpose` word
    the error raised when `model` is or holds another kind."""
    from cdmpp.model.default_expert import DefaultExpertRegressor
    from cdmpp.model.ensemble import EnsembleRegressor
    from cdmpp.model.estimator import CDMPPRegressor

    if isinstance(model, DefaultExpertRegressor):
        model = model.model_
    members = model.members_ if isinstance(model, EnsembleRegressor) else [model]
    bad = sorted({type(m).__name__ for m in members if not isinstance(m, CDMPPRegressor)})
    if bad:
        raise ValueError(f"{purpose}; {str(name)!r} is or holds another kind: {', '.join(bad)}")
    return list(members)
