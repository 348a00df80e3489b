"""bertlab.training.probe on synthetic features: the probe reaches the optimum of its own objective (checked by an
independent solve), its C is the cross-validation's best of the grid, and it is a function of its inputs."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize
from scipy.special import log_softmax
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import log_loss

from bertlab.errors import UserError
from bertlab.training.probe import Features, Probe, fit, predictions, splits

CS = [1e-4, 1e-3, 1e-2, 0.1, 1.0, 10.0]
SETTINGS = {"cs": CS, "folds": 5, "seed": 1, "tol": 1e-6, "cv_tol": 1e-6, "max_iter": 10_000}


def weak_signal(n: int, d: int, classes: int, seed: int = 0) -> Features:
    """A never-trained encoder's features, roughly: correlated noise with a weak linear signal, on scales far apart
    (mean-pooled states of a random network), so an unstandardised, briefly trained head would stop far from the
    optimum."""
    rng = np.random.default_rng(seed)
    mixing = rng.normal(size=(d, d)) + 3 * np.eye(d)
    x = rng.normal(size=(n, d)) @ mixing * rng.uniform(0.01, 30, size=d) + rng.normal(0, 5, size=d)
    w = rng.normal(size=(d, classes)) * 0.15
    y = ((x / x.std(0)) @ w + rng.gumbel(size=(n, classes))).argmax(1)
    return Features(x, y, np.arange(n))


def objective(probe: Probe, x: np.ndarray, y: np.ndarray) -> tuple[callable, np.ndarray]:
    """sklearn's L2 logistic regression objective at the probe's C on standardised `x` (0.5 |W|^2 + C * summed
    log-loss, the intercepts unpenalised; one weight vector for 2 classes, one per class otherwise), as a function
    of the flat parameters, and the probe's own parameters."""
    z = probe.scaler.transform(x)
    c, m = probe.c, probe.model
    classes = np.unique(y)
    binary = len(classes) == 2
    k, d = (1 if binary else len(classes)), z.shape[1]
    target = np.searchsorted(classes, y)

    def f(theta: np.ndarray) -> tuple[float, np.ndarray]:
        w, b = theta[:k * d].reshape(k, d), theta[k * d:]
        scores = z @ w.T + b
        if binary:
            s = scores[:, 0]
            sign = 2 * target - 1
            loss = np.logaddexp(0, -sign * s).sum()
            g = -sign / (1 + np.exp(sign * s))
            grad_w, grad_b = (g @ z)[None], np.array([g.sum()])
        else:
            logp = log_softmax(scores, axis=1)
            loss = -logp[np.arange(len(y)), target].sum()
            resid = np.exp(logp)
            resid[np.arange(len(y)), target] -= 1
            grad_w, grad_b = resid.T @ z, resid.sum(0)
        value = 0.5 * (w ** 2).sum() + c * loss
        return value, np.concatenate([(w + c * grad_w).ravel(), c * grad_b])

    return f, np.concatenate([m.coef_.ravel(), m.intercept_])


@pytest.mark.parametrize("classes", [2, 3])
def test_the_probe_reaches_the_optimum_of_its_objective(classes: int) -> None:
    train = weak_signal(600, 24, classes)
    probe = fit(train, grouped=False, **SETTINGS)
    assert probe.converged and probe.iterations < SETTINGS["max_iter"]
    f, fitted = objective(probe, train.x, train.y)
    tight = minimize(f, np.zeros_like(fitted), jac=True, method="L-BFGS-B",
                     options={"gtol": 1e-12, "ftol": 1e-15, "maxiter": 100_000, "maxcor": 50})
    assert f(fitted)[0] == pytest.approx(tight.fun, rel=1e-6)
    assert f(fitted)[0] >= tight.fun * (1 - 1e-9)  # the independent solve is at least as good: it is the optimum
    assert np.abs(f(tight.x)[1]).max() < 1e-3 * max(1.0, abs(tight.fun))
    with pytest.warns(ConvergenceWarning):  # the check tells a solver stopped early from the optimum
        early = LogisticRegression(C=probe.c, max_iter=3).fit(probe.scaler.transform(train.x), train.y)
    assert f(np.concatenate([early.coef_.ravel(), early.intercept_]))[0] > tight.fun * (1 + 1e-4)


@pytest.mark.parametrize("classes", [2, 3])
def test_the_chosen_c_is_the_best_of_the_grid_by_cross_validated_log_loss(classes: int) -> None:
    train = weak_signal(500, 16, classes, seed=3)
    probe = fit(train, grouped=False, **SETTINGS)
    z = probe.scaler.transform(train.x)
    folds = splits(train, SETTINGS["folds"], SETTINGS["seed"], grouped=False)
    losses = []
    for c in CS:  # each C and fold fitted afresh (no warm start), tightly
        per_fold = [log_loss(train.y[held], LogisticRegression(C=c, tol=1e-10, max_iter=100_000)
                             .fit(z[kept], train.y[kept]).predict_proba(z[held]), labels=np.unique(train.y))
                    for kept, held in folds]
        losses.append(float(np.mean(per_fold)))
    assert probe.cv_log_loss == pytest.approx(losses, rel=1e-4)
    assert probe.c == CS[int(np.argmin(losses))]
    assert 0 < CS.index(probe.c) < len(CS) - 1  # an interior optimum: the grid brackets it
    record = probe.record(SETTINGS["folds"], SETTINGS["tol"], SETTINGS["cv_tol"], SETTINGS["max_iter"], len(train.x))
    assert record["C"] == probe.c and record["Cs"] == CS and record["C_at_grid_edge"] is False
    assert record["converged"] is True and record["features"] == 16 and record["train_vectors"] == 500
    # the default's looser cross-validation (`probe_cv_tol` 1e-4) picks the same C from nearly the same curve, and
    # the final fit at that C is the same optimum
    loose = fit(train, grouped=False, **(SETTINGS | {"cv_tol": 1e-4}))
    assert loose.c == probe.c and loose.cv_log_loss == pytest.approx(losses, rel=1e-3)
    assert np.allclose(loose.model.coef_, probe.model.coef_, atol=1e-5)


def test_the_probe_is_a_function_of_its_inputs() -> None:
    train, dev = weak_signal(400, 12, 3, seed=5), weak_signal(100, 12, 3, seed=6)
    first, second = (fit(train, grouped=False, **SETTINGS) for _ in range(2))
    rows = [{"input_ids": [0]} for _ in range(100)]
    assert predictions(first, dev, rows, "classification", 0) == predictions(second, dev, rows, "classification", 0)
    assert np.array_equal(first.model.coef_, second.model.coef_) and first.cv_log_loss == second.cv_log_loss


def test_tagging_folds_keep_each_sentence_on_one_side() -> None:
    train = weak_signal(300, 8, 3, seed=7)
    train.row = np.repeat(np.arange(60), 5)  # 60 sentences of 5 words
    folds = splits(train, 5, 1, grouped=True)
    assert sorted(np.concatenate([held for _, held in folds]).tolist()) == list(range(300))
    for kept, held in folds:
        assert not set(train.row[kept]) & set(train.row[held])


def test_tagging_predictions_land_on_each_words_first_sub_token() -> None:
    train = weak_signal(300, 8, 3, seed=8)
    probe = fit(train, grouped=False, **SETTINGS)
    rows = [{"input_ids": [2, 5, 6, 7, 3], "label_ids": [-100, 1, -100, 0, -100]},
            {"input_ids": [2, 8, 3], "label_ids": [-100, 2, -100]}]
    words = Features(train.x[:3], None, np.array([0, 0, 1]))
    expected = probe.model.predict(probe.scaler.transform(train.x[:3])).tolist()
    tags = predictions(probe, words, rows, "tagging", outside=9)
    assert tags == [[9, expected[0], 9, expected[1], 9], [9, expected[2], 9]]


def test_too_few_examples_for_the_folds_is_a_one_line_error() -> None:
    train = weak_signal(4, 3, 2)
    with pytest.raises(UserError, match=r"^finetune.probe_folds=5: the probe's cross-validation needs at least 5 "
                                        r"training examples, got 4$"):
        fit(train, grouped=False, **SETTINGS)
