"""The CDMPP models an estimator is made of (calibration fine-tunes them; their embeddings
choose tasks and place programs)."""

from __future__ import annotations


def cdmpp_members(model, name, purpose: str = "calibrate needs a model that holds a CDMPP "
                  "model") -> list:
    """The CDMPP models `model` is made of, in order: itself, or those of an ensemble (e.g.
    the shipped default's three seeds), ensembles within opened (`flat_members`), under a
    default-program expert if it has one (`model.default_expert`; the expert itself is not
    one of them). Members of other kinds (the shipped default's XGBoost) are left out; a
    model without any CDMPP model is refused, `name` and `purpose` wording the error."""
    from cdmpp.model.default_expert import DefaultExpertRegressor
    from cdmpp.model.estimator import CDMPPRegressor

    if isinstance(model, DefaultExpertRegressor):
        model = model.model_
    members = flat_members(model)
    cdmpp = [m for m in members if isinstance(m, CDMPPRegressor)]
    if not cdmpp:
        kinds = sorted({type(m).__name__ for m in members})
        raise ValueError(f"{purpose}; {str(name)!r} holds none, only {', '.join(kinds)}")
    return cdmpp


def flat_members(model) -> list:
    """The estimators `model` is made of, ensembles within ensembles opened (the shipped
    default holds the three seeds' ensemble and XGBoost), in order."""
    from cdmpp.model.ensemble import EnsembleRegressor

    if isinstance(model, EnsembleRegressor):
        return [leaf for member in model.members_ for leaf in flat_members(member)]
    return [model]


def _placing(model) -> list:
    """`cdmpp_members` of a model whose embeddings place programs (beside other members)."""
    return cdmpp_members(model, type(model).__name__, "per-program factors need the "
                         "embeddings of CDMPP models (use neighbors=0)")


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
