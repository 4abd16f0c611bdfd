"""Backtest of the scaling laws on every recorded (calibration, actual) pair.

For each promotion the project has recorded, the calibration points (the
winner at B_ref / 64, / 32, / 16, same S, not private) and the promoted
run's actual accuracy at B_ref, this fits every law of
`tan_tune/promote/scaling_law.py` to the calibration points, predicts B_ref,
and prints per law the prediction error on each pair, the mean absolute
error, how often its 90% interval covered the actual, and the chosen law's
interval with its width. The law `fit` chooses by
leave-one-out error is scored the same way ("chosen").

The recorded pairs are figures measured by earlier runs and written in
docs/benchmarks.md and docs/searching.md (dates there): two Fashion-MNIST
end-to-end promotions with calibration scored on validation and two with
calibration measured as the promoted run (search seeds 0 and 1, the latter again
with two calibration seeds), the transfer benchmark's pick with its three calibration runs
and its six settings (one point each, at B_ref / 16, so only the largest
point's law applies), and the digits demo's promotion over three secret
draws (its calibration runs are seeded publicly, so they are the same points
each time; only the private run's draws differ).

Run: .venv/bin/python benchmarks/prediction.py [--smoke]
"""

import argparse
import dataclasses

from tan_tune.promote import scaling_law


@dataclasses.dataclass(frozen=True)
class Recorded:
  """One promotion: where its points were measured and what it reached."""

  name: str
  batch_sizes: tuple[int, ...]
  accuracies: tuple[float, ...]
  reference_batch_size: int
  actual: float
  held_out_size: int


_FASHION = 4096
# The test splits the promoted runs are scored on.
_FASHION_TEST, _DIGITS_TEST = 10_000, 360
_RECORDED = (
    # docs/benchmarks.md, "Fashion-MNIST end to end" (2026-11-22); the
    # calibration runs scored on validation, the promoted run on test.
    Recorded("fashion-mnist e2e, search seed 0", (64, 128, 256),
             (0.8452, 0.8638, 0.8700), _FASHION, 0.8697, _FASHION_TEST),
    # The second end-to-end run, another search seed, 2 workers.
    Recorded("fashion-mnist e2e, second seed", (64, 128, 256),
             (0.835, 0.858, 0.869), _FASHION, 0.865, _FASHION_TEST),
    # docs/benchmarks.md, "Predicting the promoted run" (2026-11-25): search
    # seed 0 again, calibration measured as the promoted run (test split).
    Recorded("fashion-mnist e2e, test-scored calibration", (64, 128, 256),
             (0.8442, 0.8584, 0.8635), _FASHION, 0.8682, _FASHION_TEST),
    # The same, search seed 1, `promote --calibrate --workers 2` (2026-11-25).
    Recorded("fashion-mnist e2e, search seed 1, test-scored", (64, 128, 256),
             (0.8312, 0.8550, 0.8628), _FASHION, 0.8674, _FASHION_TEST),
    # The same winner from a repeat of that search, `--calibration-seeds 2`:
    # two runs at each B (the first seed's are the run above's).
    Recorded("fashion-mnist e2e, seed 1, 2 calibration seeds",
             (64, 64, 128, 128, 256, 256),
             (0.8312, 0.8301, 0.8550, 0.8487, 0.8628, 0.8626), _FASHION,
             0.8664, _FASHION_TEST),
    # docs/benchmarks.md, "Does the ranking transfer?" (2026-11-22): the pick
    # at B_ref / 64, / 32, / 16 on test, and the six settings at B_ref / 16.
    Recorded("transfer: the pick, three points", (64, 128, 256),
             (0.8359, 0.8590, 0.8644), _FASHION, 0.8709, _FASHION_TEST),
    *(Recorded(f"transfer: lr {lr}, momentum {momentum}", (256,), (small,),
               _FASHION, large, _FASHION_TEST)
      for lr, momentum, small, large in (
          (0.1, 0.9, 0.8061, 0.8065), (0.3, 0.9, 0.8492, 0.8514),
          (1, 0.9, 0.8592, 0.8652), (3, 0.9, 0.7967, 0.8311),
          (2, 0, 0.8407, 0.8411), (6, 0, 0.8644, 0.8709))),
    # The digits demo (docs/getting-started.md, 2026-11-22;
    # docs/benchmarks.md's clipping equivalence; `make demo` of 2026-11-25):
    # calibration on validation at B = 8, 16, 32 of B_ref 512, the promoted
    # run's EMA accuracy on test.
    *(Recorded(f"digits demo, draw {i}", (8, 16, 32),
               (0.9136, 0.9359, 0.9331), 512, actual,
               _DIGITS_TEST)
      for i, actual in enumerate((0.956, 0.9639, 0.950), start=1)),
    # The same since 2026-11-25, calibration measured as the promoted run
    # (whole training set, test split): three searches and promotions.
    *(Recorded(f"digits demo, test-scored calibration, draw {i}",
               (8, 16, 32), (0.9139, 0.9278, 0.9417), 512, actual,
               _DIGITS_TEST)
      for i, actual in enumerate((0.9611, 0.9583, 0.9611), start=1)),
)
_CHOSEN = "chosen"


def _predictions(run: Recorded) -> dict[str, tuple[float, tuple | None]]:
  """Each law's (prediction, 90% interval) at B_ref, and the chosen one's."""
  if len(set(run.batch_sizes)) < 2:  # One batch size: the point itself.
    only = (float(sum(run.accuracies) / len(run.accuracies)), None)
    return {scaling_law.LARGEST: only, _CHOSEN: only}
  chosen = scaling_law.fit(run.batch_sizes, run.accuracies,
                           held_out_size=run.held_out_size)
  found = {f.law: (f.predict(run.reference_batch_size),
                   f.interval(run.reference_batch_size))
           for f in chosen.candidates()}
  found[_CHOSEN] = found[chosen.law]
  return found


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--smoke", action="store_true",
                      help="the same backtest: it takes a second already")
  parser.parse_args()
  columns = (*scaling_law.LAWS, _CHOSEN)
  errors = {law: [] for law in columns}
  covered = {law: [] for law in columns}
  widths = []
  print(f"{'recorded promotion':<46} {'actual':>7} " + " ".join(
      f"{law:>13}" for law in columns) + "  chosen's 90% interval")
  for run in _RECORDED:
    found = _predictions(run)
    cells = []
    for law in columns:
      if law not in found:
        cells.append(f"{'-':>13}")
        continue
      predicted, interval = found[law]
      error = predicted - run.actual
      errors[law].append(error)
      hit = bool(interval and interval[0] <= run.actual <= interval[1])
      if interval:
        covered[law].append(hit)
      cells.append(f"{100 * error:>+12.2f}" + ("*" if hit else " "))
    interval = found[_CHOSEN][1]
    band = "none: one batch size"
    if interval:
      widths.append(interval[1] - interval[0])
      band = (f"[{100 * interval[0]:.2f}, {100 * interval[1]:.2f}], width"
              f" {100 * widths[-1]:.2f}")
    print(f"{run.name:<46} {run.actual:>7.4f} " + " ".join(cells) + "  "
          + band)
  print("\nerrors in points (predicted - actual); * the 90% interval covered"
        " the actual")
  for law in columns:
    values = errors[law]
    if not values:
      continue
    mean_abs = sum(abs(e) for e in values) / len(values)
    worst = max(values, key=abs)
    print(f"{law:>13}: {len(values)} predictions, mean |error|"
          f" {100 * mean_abs:.2f} points, worst {100 * worst:+.2f}; 90%"
          f" interval covered {sum(covered[law])} of {len(covered[law])}"
          " (a single batch size has none)")
  print(f"chosen interval width: mean {100 * sum(widths) / len(widths):.2f}"
        f" points, widest {100 * max(widths):.2f}")
  chosen = [scaling_law.fit(r.batch_sizes, r.accuracies).law
            for r in _RECORDED if len(set(r.batch_sizes)) > 1]
  print("laws chosen: " + ", ".join(
      f"{law} {chosen.count(law)}" for law in scaling_law.LAWS
      if chosen.count(law)))

if __name__ == "__main__":
  main()
