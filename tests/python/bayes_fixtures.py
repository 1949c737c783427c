"""Writes src/model/sweep/bayes/fixtures.json: values computed by scipy, scikit-learn and W&B's
`sweeps` 0.3.0, which the bayes module's unit tests compare with its own.

    $(bash tests/python/sweeps.sh) tests/python/bayes_fixtures.py > src/model/sweep/bayes/fixtures.json
"""
import json
import warnings

warnings.filterwarnings("ignore")

import numpy as np
from scipy import special, stats
from sklearn import gaussian_process as gp
from sweeps import bayes_search
from sweeps.params import HyperParameter

out = {}

zs = [-30.0, -9.0, -5.5, -3.2, -1.0, -0.3, 0.0, 0.2, 0.49, 0.51, 1.7, 3.9, 4.1, 6.0, 8.0]
out["normal_cdf"] = [[z, float(stats.norm.cdf(z))] for z in zs]
ps = [1e-300, 1e-20, 1e-9, 1e-4, 0.02, 0.024, 0.03, 0.2, 0.5, 0.77, 0.975, 0.98, 0.9999, 1 - 1e-12]
out["normal_quantile"] = [[p, float(stats.norm.ppf(p))] for p in ps]
xs = [0.1, 0.5, 1.0, 1.5, 3.7, 10.0, 171.2, 1e5]
out["ln_gamma"] = [[x, float(special.gammaln(x))] for x in xs]
beta = []
for a, b in [(0.5, 0.5), (2.0, 6.0), (1.0, 1.0), (30.0, 0.01), (0.001, 3.0), (1000.0, 1000.0)]:
    for x in [1e-6, 0.01, 0.3, 0.5, 0.9, 0.999999]:
        beta.append([x, a, b, float(special.betainc(a, b, x))])
out["beta_cdf"] = beta
out["beta_quantile"] = [[p, a, b, float(stats.beta.ppf(p, a, b))] for p in [0.01, 0.5, 0.93] for a, b in [(0.5, 0.5), (2.0, 6.0), (5.0, 1.5)]]

# The kernel and the fit: scikit-learn with W&B's settings, at fixed length scales.
rng = np.random.RandomState(7)
X = rng.uniform(size=(9, 3))
y = np.sin(5 * X[:, 0]) + X[:, 1] ** 2 - X[:, 2]
y = (y - y.mean()) / y.std()
T = rng.uniform(size=(6, 3))
fixed = []
for length in [0.05, 0.3, 1.0, 4.0]:
    reg = gp.GaussianProcessRegressor(kernel=gp.kernels.Matern(length_scale=length, nu=1.5), alpha=1e-7, optimizer=None)
    reg.fit(X, y)
    mean, std = reg.predict(T, return_std=True)
    fixed.append({
        "length_scale": length,
        "log_likelihood": float(reg.log_marginal_likelihood_value_),
        "mean": mean.tolist(),
        "std": std.tolist(),
    })
reg = gp.GaussianProcessRegressor(kernel=gp.kernels.Matern(nu=1.5), alpha=1e-7, n_restarts_optimizer=2, random_state=2)
reg.fit(X, y)
out["gp"] = {
    "x": X.tolist(),
    "y": y.tolist(),
    "test": T.tolist(),
    "fixed": fixed,
    "fitted_length_scale": float(np.exp(reg.kernel_.theta[0])),
    "fitted_log_likelihood": float(reg.log_marginal_likelihood_value_),
}

# W&B's next_sample on given candidates, with members in flight imputed.
cases = []
for seed in range(4):
    r = np.random.RandomState(100 + seed)
    n, d = 12, 2
    sx = r.uniform(size=(n, d))
    sy = (sx[:, 0] - 0.3) ** 2 + (sx[:, 1] - 0.7) ** 2 + 0.01 * r.normal(size=n)
    cur = r.uniform(size=(seed, d)) if seed else None
    test = r.uniform(size=(300, d))
    np.random.seed(0)
    suggested, _, _, _, ei, warn = bayes_search.next_sample(sample_X=sx, sample_y=sy, current_X=cur, test_X=test)
    index = int(np.where((test == suggested).all(axis=1))[0][0])
    cases.append({
        "x": sx.tolist(), "y": sy.tolist(),
        "current": [] if cur is None else cur.tolist(),
        "test": test.tolist(), "index": index, "expected_improvement": float(ei), "poor_fit": bool(warn),
    })
out["next_sample"] = cases

# W&B's unit-cube encoding of parameters: its cdf of values, its ppf of points.
params = {
    "cat": {"values": ["a", "b", "c", 7]},
    "catp": {"values": [1, 2, 3], "probabilities": [0.2, 0.5, 0.3]},
    "int": {"min": -2, "max": 5},
    "uni": {"min": -1.5, "max": 3.0},
    "qu": {"distribution": "q_uniform", "min": 0, "max": 10, "q": 2},
    "logv": {"distribution": "log_uniform_values", "min": 1e-5, "max": 1e-1},
    "log": {"distribution": "log_uniform", "min": -3.0, "max": 2.0},
    "inv": {"distribution": "inv_log_uniform", "min": 0.5, "max": 4.0},
    "invv": {"distribution": "inv_log_uniform_values", "min": 0.01, "max": 2.0},
    "norm": {"distribution": "normal", "mu": 1.0, "sigma": 2.0},
    "lnorm": {"distribution": "log_normal", "mu": -1.0, "sigma": 0.5},
    "beta": {"distribution": "beta", "a": 2.0, "b": 5.0},
}
us = [0.013, 0.2, 0.37, 0.5, 0.74, 0.99]
encoding = {}
for name, config in params.items():
    hp = HyperParameter(name, config)
    decoded = [hp.ppf(u) for u in us]
    decoded = [v.item() if hasattr(v, "item") else v for v in decoded]
    if name == "cat":
        encoded = [float(hp.cdf(hp.value_to_idx(v))) for v in decoded]
    elif name == "catp":
        encoded = [float(np.cumsum(config["probabilities"])[config["values"].index(v)]) for v in decoded]
    else:
        encoded = [float(hp.cdf(v)) for v in decoded]
    encoding[name] = {"config": config, "u": us, "values": decoded, "encoded": encoded}
out["space"] = encoding

print(json.dumps(out, indent=1))
