"""Piecewise direct standardisation (PDS), the chemometrics standard of calibration transfer.

Each band j of the old instrument is a local principal-component regression on the new
instrument's bands within `window` bands of its wavelength, learnt from transfer samples read
by both:

    x̂_j = x̄_j + (z − z̄)_S b_j,   S = {i : |λ_i − λ_j| ≤ (window + ½)·Δλ}

with `b_j` from the first `components` singular vectors of the centred `Z_S`. The window and the
components are chosen by leave-one-out reconstruction error on the pairs (`pds_by_loo`).
Shared by `bench/instrument_swap.py` and `bench/instrument_map.py`.
"""

import numpy as np


def pds(new, old, new_pos, old_pos, window, components):
    """The map from new readings (rows) to old ones, learnt from the pairs `new`, `old`."""
    new_mean, old_mean = new.mean(0), old.mean(0)
    zc, xc = new - new_mean, old - old_mean
    spacing = np.median(np.diff(new_pos))
    transfer = np.zeros((len(old_pos), len(new_pos)))
    for j, at in enumerate(old_pos):
        sel = np.flatnonzero(np.abs(new_pos - at) <= (window + 0.5) * spacing + 1e-9)
        if len(sel) == 0:
            sel = np.array([np.argmin(np.abs(new_pos - at))])
        u, s, vt = np.linalg.svd(zc[:, sel], full_matrices=False)
        r = min(components, len(s), int(np.sum(s > 1e-10 * s[0])))
        transfer[j, sel] = vt[:r].T @ ((u[:, :r].T @ xc[:, j]) / s[:r])
    return lambda z: old_mean + (z - new_mean) @ transfer.T


def pds_by_loo(new, old, new_pos, old_pos, windows=(1, 2, 3, 5), components=(1, 2, 3)):
    """PDS with the window and components of the least leave-one-out reconstruction error;
    returns the map learnt on all pairs and the `(window, components)` chosen."""
    best = None
    for window in windows:
        for comps in components:
            error = 0.0
            for i in range(len(new)):
                keep = np.delete(np.arange(len(new)), i)
                standardise = pds(new[keep], old[keep], new_pos, old_pos, window, comps)
                error += np.sum((standardise(new[i:i + 1]) - old[i:i + 1]) ** 2)
            if best is None or error < best[0]:
                best = (error, window, comps)
    return pds(new, old, new_pos, old_pos, best[1], best[2]), best[1:]
