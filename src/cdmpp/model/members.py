"""The CDMPP models an estimator is made of (calibration fine-tunes them; their embeddings
choose tasks and place programs)."""

from __future__ import annotations


def cdmpp_members(model, name, purpose: str = "calibrate fine-tunes CDMPP models (--rescale "
                  "scales any model that holds one)", others: bool = False) -> list:
    """The CDMPP models `model` is made of: itself, or the members of an ensemble of them
    (e.g. the shipped default, three seeds), under a default-program expert if it has one
    (`model.default_expert`; the expert itself is not one of them). `name` and `purpose` word
    the error raised when `model` is or holds another kind. `others`: an ensemble may hold
    other kinds too (e.g. the shipped `ensemble`'s XGBoost), which are left out, and ensembles
    within are opened (`flat_members`); at least one CDMPP model is still needed."""
    from cdmpp.model.default_expert import DefaultExpertRegressor
    from cdmpp.model.ensemble import EnsembleRegressor
    from cdmpp.model.estimator import CDMPPRegressor

    if isinstance(model, DefaultExpertRegressor):
        model = model.model_
    if others:
        members = flat_members(model)
    else:  # fine-tuning rebuilds one level of members: a nested ensemble is another kind
        members = model.members_ if isinstance(model, EnsembleRegressor) else [model]
    cdmpp = [m for m in members if isinstance(m, CDMPPRegressor)]
    bad = sorted({type(m).__name__ for m in members if not isinstance(m, CDMPPRegressor)})
    if bad and not (others and cdmpp):
        raise ValueError(f"{purpose}; {str(name)!r} is or holds another kind: {', '.join(bad)}")
    return cdmpp


def flat_members(model) -> list:
    """The estimators `model` is made of, ensembles within ensembles opened (the shipped
    `ensemble` holds the three seeds' ensemble and XGBoost), in order."""
    from cdmpp.model.ensemble import EnsembleRegressor

    if isinstance(model, EnsembleRegressor):
        return [leaf for member in model.members_ for leaf in flat_members(member)]
    return [model]


def _placing(model) -> list:
    """`cdmpp_members` of a model whose embeddings place programs (beside other members)."""
    return cdmpp_members(model, type(model).__name__, "per-program factors need the "
                         "embeddings of CDMPP models (use neighbors=0)", others=True)


def embedder(model):
    """The CDMPP model whose embedding places programs for per-program factors: the first of
    those `model` is made of, the one `cdmpp calibrate` chooses tasks with."""
    return _placing(model)[0]


def predict_and_embed(model, programs) -> tuple:
    """`model.predict(programs)` and the embeddings of the first CDMPP model it is made of
    (`cdmpp_members`; what `ScaledRegressor` places programs with), from the one pass through
    that model's network the prediction makes anyway, not a second one."""
    import numpy as np  # here: the CLI imports this module, and starts without numpy

    from cdmpp.model.default_expert import DefaultExpertRegressor
    from cdmpp.model.ensemble import EnsembleRegressor
    from cdmpp.model.estimator import predict_together

    _placing(model)  # a clear error for a model without CDMPP members
    inner = model.model_ if isinstance(model, DefaultExpertRegressor) else model
    if isinstance(inner, EnsembleRegressor):  # its other members predict as they do alone
        predictions, embeddings = inner.member_predictions(programs, embed=True)
        predicted = inner.combine(predictions)
    else:
        (predicted,), embeddings = predict_together([inner], programs, embed=0)
    if isinstance(model, DefaultExpertRegressor):
        predicted = model.blend(programs, predicted)
    return np.asarray(predicted, dtype=np.float64), embeddings
