"""sklearn's parameter protocol for cdmpp's estimators: `get_params` / `set_params` over the
keyword arguments of `__init__`, so `sklearn.base.clone` and grid searches can copy and vary
an unfitted estimator."""

from __future__ import annotations

import inspect


class ParamsMixin:
    @classmethod
    def _param_names(cls) -> list[str]:
        return [p for p in inspect.signature(cls.__init__).parameters if p != "self"]

    def get_params(self, deep: bool = True) -> dict:
        """The keyword arguments of `__init__`. `deep` is sklearn's; no parameter here is an
        estimator whose own parameters would be listed."""
        return {name: getattr(self, name) for name in self._param_names()}

    def set_params(self, **params):
        """Set keyword arguments of `__init__`; returns self."""
        names = self._param_names()
        unknown = sorted(set(params) - set(names))
        if unknown:
            raise ValueError(f"{type(self).__name__} has no parameter(s) {unknown}: "
                             f"its parameters are {names}")
        for name, value in params.items():
            setattr(self, name, value)
        return self
