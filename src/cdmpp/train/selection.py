"""Which tasks to measure on a new device: KMeans over task embeddings (CDMPP), or random.

KMeans with k = the number of tasks we can afford; clusters are visited by decreasing size and
each gives its unchosen task nearest the centroid. `cmd_to_all` judges a selection: the central
moment discrepancy between all task embeddings and the chosen ones (lower: more representative).
"""

from __future__ import annotations

import numpy as np


def kmeans_select(embeddings: np.ndarray, names, k: int, seed: int = 0) -> list:
    """k distinct task names, one per KMeans cluster, largest clusters first."""
    from sklearn.cluster import KMeans

    names = list(names)
    if not 0 < k <= len(names):
        raise ValueError(f"k must be between 1 and the number of tasks ({len(names)}), not {k}")
    x = np.asarray(embeddings, dtype=np.float64)
    km = KMeans(n_clusters=k, n_init=10, random_state=seed).fit(x)
    sizes = np.bincount(km.labels_, minlength=k)
    chosen: list[int] = []
    for cluster in np.argsort(-sizes, kind="stable"):
        members = np.flatnonzero(km.labels_ == cluster)
        order = members[np.argsort(np.linalg.norm(x[members] - km.cluster_centers_[cluster], axis=1),
                                   kind="stable")]
        pick = next((i for i in order if i not in chosen), None)
        if pick is None:  # an empty or exhausted cluster: nearest unchosen task overall
            rest = [i for i in range(len(names)) if i not in chosen]
            pick = rest[int(np.argmin(np.linalg.norm(x[rest] - km.cluster_centers_[cluster], axis=1)))]
        chosen.append(int(pick))
    return [names[i] for i in chosen]


def random_select(names, k: int, seed: int = 0) -> list:
    names = list(names)
    if not 0 < k <= len(names):
        raise ValueError(f"k must be between 1 and the number of tasks ({len(names)}), not {k}")
    rng = np.random.default_rng(seed)
    return [names[i] for i in rng.choice(len(names), size=k, replace=False)]


def task_embeddings(estimator, programs, tasks) -> tuple[np.ndarray, list]:
    """Mean program embedding of each task (from a fitted CDMPPRegressor)."""
    z = estimator.embed(programs)
    tasks = np.asarray(tasks)
    names = sorted(set(tasks.tolist()))
    return np.stack([z[tasks == t].mean(0) for t in names]), names


def cmd_to_all(embeddings: np.ndarray, names, chosen) -> float:
    """CMD between all task embeddings and the chosen tasks' embeddings."""
    import torch

    from cdmpp.model.adaptation import cmd

    index = {n: i for i, n in enumerate(names)}
    x = torch.as_tensor(np.asarray(embeddings, dtype=np.float32))
    picked = x[[index[c] for c in chosen]]
    return float(cmd(x, picked))
