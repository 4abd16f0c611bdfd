"""Time and peak memory of one DP-SGD step: tan_tune vs Opacus vs non-private.

WRN-16-4 (GroupNorm) on random 3x32x32 images and the Fashion-MNIST space's
26k-parameter CNN on 1x28x28, 10 classes, for each batch size B in {32, 128}
and AugMult order K in {1, 4}. Measured methods:

* non-private: tan_tune's DPSGD with clip_norm=None, ordinary backprop of the
  mean loss over the K copies; the baseline of every ratio.
* tan_tune-fast: DPSGD with C = 1, sigma = 1 on one micro-batch of B examples,
  clipped sums from stored activations (`fast_clipping`: ghost norm or
  per-layer instantiation, averaged over K before clipping); the default.
* tan_tune-vmap: the same step from per-sample gradients by torch.func.
* opacus-hooks, opacus-functorch, opacus-ghost: the same step through Opacus'
  `PrivacyEngine.make_private` (forward, backward, optimizer step, zero_grad).
  Opacus cannot average over K before clipping, so for K > 1 hooks and
  functorch are fed the B*K copies as rows and clip each copy on its own
  ("per-copy"): not the same computation as tan_tune's, and a cost shown only
  for reference. Ghost with K > 1 is n/a.

Each method of a (B, K) runs in its own subprocess (`--worker`), with its own
model built from the same seed and the same batch. The processes take turns,
one step at a time, so that a change in the machine's load hits all methods
alike: 2 warm-up rounds, then timed rounds until each method has 5 timed steps
or the configuration's timed steps have taken --budget seconds (at least one
round), which keeps the slowest configurations affordable on 2 CPU cores. The
table shows the median.

Peak memory comes from the same steps: each worker, once built, resets its
peak and notes the memory in use; the peak over its steps minus that is the
memory one step needs, shown as a ratio to the non-private step's. On CPU this
is the resident set (VmRSS, and VmHWM reset through /proc/self/clear_refs;
Linux only), which counts the whole process, allocator slack included: the
footprint a user would see, not the tensors alone. On CUDA it is
torch.cuda.memory_allocated and max_memory_allocated.

Run: .venv/bin/python benchmarks/dp_step.py [--device cpu|cuda]
     [--models wrn-16-4,dp-cnn] [--configs 32x1,32x4,128x1,128x4]
     [--methods tan_tune-fast,...] [--repeats 5] [--budget 30] [--smoke]
"""

import argparse
import importlib.metadata
import os
import platform
import statistics
import subprocess
import sys
import time
from typing import Callable
import warnings

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

# Opacus and tan_tune's training are imported where a worker builds its
# step: the table's process only drives the workers, and each import costs
# seconds of CPU in every one of a table's dozen processes.
# pylint: disable=g-import-not-at-top

CONFIGS = ((32, 1), (32, 4), (128, 1), (128, 4))
IMAGE_SHAPES = {"wrn-16-4": (3, 32, 32), "dp-cnn": (1, 28, 28)}
NUM_CLASSES = 10
CLIP_NORM, SIGMA, LR = 1.0, 1.0, 0.1
NON_PRIVATE = "non-private"
DP_METHODS = ("tan_tune-fast", "tan_tune-vmap", "opacus-hooks",
              "opacus-functorch", "opacus-ghost")
# JL clipping with r projections, 'tan_tune-jl<r>' (`benchmarks/jl.py`).
JL_METHODS = tuple(f"tan_tune-jl{r}" for r in (1, 4, 10, 32))

Step = Callable[[], None]


def _tan_tune_step(model: nn.Module, images: torch.Tensor,
                   labels: torch.Tensor, clipping: str | None) -> Step:
  """One DPSGD step on the single micro-batch (images [B, K, ...], labels);
  clipping None is the non-private step, 'jl<r>' JL with r projections."""
  from tan_tune.training.dp_sgd import DPSGD

  projections = None
  if clipping and clipping.startswith("jl"):
    clipping, projections = "jl", int(clipping.removeprefix("jl"))
  dp = DPSGD(
      model, torch.optim.SGD(model.parameters(), lr=LR),
      clip_norm=CLIP_NORM if clipping else None,
      noise_multiplier=SIGMA if clipping else 0.0,
      expected_batch_size=labels.shape[0],
      generator=torch.Generator(images.device).manual_seed(0),
      clipping=clipping or "vmap",
      jl_projections=projections,
  )
  return lambda: dp.step([(images, labels, None)])


def _opacus_step(model: nn.Module, images: torch.Tensor, labels: torch.Tensor,
                 mode: str) -> Step:
  """One Opacus step on the B*K copies as rows, each clipped on its own."""
  from opacus import PrivacyEngine

  rows = images.flatten(end_dim=1)
  row_labels = labels.repeat_interleave(images.shape[1])
  # The loader only tells Opacus the expected batch size; it is not iterated.
  loader = DataLoader(TensorDataset(rows, row_labels), batch_size=len(rows))
  private = PrivacyEngine(accountant="rdp").make_private(
      module=model, optimizer=torch.optim.SGD(model.parameters(), lr=LR),
      criterion=nn.CrossEntropyLoss(), data_loader=loader,
      noise_multiplier=SIGMA, max_grad_norm=CLIP_NORM, grad_sample_mode=mode,
  )
  if mode == "ghost":
    module, optimizer, criterion, _ = private
  else:
    (module, optimizer, _), criterion = private, nn.CrossEntropyLoss()

  def step() -> None:
    criterion(module(rows), row_labels).backward()
    optimizer.step()
    # Frees the per-sample gradients between steps, as DPSGD.step does.
    optimizer.zero_grad(set_to_none=True)

  return step


def _build_step(method: str, model_name: str, batch: int, k: int,
                device: torch.device) -> Step:
  """A fresh model and batch, the same for every method, and its step."""
  from tan_tune.training.models import ModelConfig, build_model

  torch.manual_seed(0)
  shape = IMAGE_SHAPES[model_name]
  model = build_model(ModelConfig(model_name), shape, NUM_CLASSES)
  model.to(device)
  images = torch.randn(batch, k, *shape, device=device)
  labels = torch.randint(NUM_CLASSES, (batch,), device=device)
  if method.startswith("opacus-"):
    return _opacus_step(model, images, labels, method.removeprefix("opacus-"))
  return _tan_tune_step(model, images, labels,
                        clipping=method.removeprefix("tan_tune-")
                        if method != NON_PRIVATE else None)


def _methods(k: int, wanted: list[str]) -> tuple[str, ...]:
  """Non-private first; Opacus' ghost clipping cannot take K > 1."""
  return (NON_PRIVATE,) + tuple(
      m for m in DP_METHODS + JL_METHODS
      if m in wanted and (k == 1 or m != "opacus-ghost"))


def sync(device: torch.device) -> None:
  if device.type == "cuda":
    torch.cuda.synchronize(device)


def status_bytes(field: str) -> int:
  with open("/proc/self/status", encoding="ascii") as status:
    for line in status:
      if line.startswith(f"{field}:"):
        return int(line.split()[1]) * 1024  # Given in kB.
  raise OSError(f"no {field} in /proc/self/status")


def reset_peak(device: torch.device) -> int:
  """Forgets the peak memory so far; returns the memory in use now."""
  if device.type == "cuda":
    torch.cuda.reset_peak_memory_stats(device)
    return torch.cuda.memory_allocated(device)
  with open("/proc/self/clear_refs", "w", encoding="ascii") as clear_refs:
    clear_refs.write("5")  # Sets VmHWM to VmRSS.
  return status_bytes("VmRSS")


def peak(device: torch.device) -> int:
  if device.type == "cuda":
    return torch.cuda.max_memory_allocated(device)
  return status_bytes("VmHWM")


def _worker(method: str, model_name: str, batch: int, k: int,
            device: torch.device) -> None:
  """Subprocess mode: takes one step per line read from stdin.

  Answers each with the step's seconds and the peak memory so far above what
  was in use before the first step.
  """
  warnings.filterwarnings("ignore", message="Secure RNG turned off")
  warnings.filterwarnings("ignore", message="Full backward hook is firing")
  step = _build_step(method, model_name, batch, k, device)
  in_use = reset_peak(device)
  print(flush=True)  # Ready.
  for _ in sys.stdin:
    start = time.perf_counter()
    step()
    sync(device)
    print(time.perf_counter() - start, peak(device) - in_use, flush=True)


def _answer(method: str, worker: subprocess.Popen) -> str:
  line = worker.stdout.readline()
  if not line:
    raise RuntimeError(f"{method} worker exited with status {worker.wait()}")
  return line


def _run_config(
    model_name: str, batch: int, k: int, args: argparse.Namespace
) -> tuple[dict[str, float], dict[str, int], int]:
  """Median step ms and step memory by method, and the timed steps of each."""
  workers = {
      m: subprocess.Popen(
          [sys.executable, __file__, "--device", args.device,
           "--worker", m, model_name, str(batch), str(k)],
          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
      for m in _methods(k, args.methods.split(","))
  }
  try:
    for method, worker in workers.items():
      _answer(method, worker)
    times = {m: [] for m in workers}
    memory = {}
    for round_ in range(args.warmup + args.repeats):
      if round_ > args.warmup and sum(map(sum, times.values())) > args.budget:
        break
      for method, worker in workers.items():
        worker.stdin.write("\n")
        worker.stdin.flush()
        seconds, memory[method] = _answer(method, worker).split()
        if round_ >= args.warmup:
          times[method].append(float(seconds))
  finally:
    for worker in workers.values():
      worker.stdin.close()
      worker.wait()
  ms = {m: statistics.median(t) * 1e3 for m, t in times.items()}
  return ms, {m: int(b) for m, b in memory.items()}, len(times[NON_PRIVATE])


def _machine(device: torch.device) -> str:
  if device.type == "cuda":
    hardware = torch.cuda.get_device_name(device)
  else:
    hardware = (f"{platform.processor() or platform.machine()},"
                f" {os.cpu_count()} cores, {torch.get_num_threads()} threads")
  return (f"machine: {hardware}; python {platform.python_version()},"
          f" torch {torch.__version__},"
          f" opacus {importlib.metadata.version('opacus')}")


def _table(args: argparse.Namespace) -> None:
  print(_machine(torch.device(args.device)))
  print(f"C={CLIP_NORM} sigma={SIGMA}; {args.warmup} warm-up rounds, median of"
        f" up to {args.repeats} steps (budget {args.budget:g} s a"
        " configuration)")
  print(f"load average at start: {os.getloadavg()[0]:.2f}")
  print(f"{'model':<9} {'B':>4} {'K':>2} {'method':<17} {'clips':<12}"
        f" {'steps':>5} {'ms':>8} {'time x':>7} {'mem x':>6}")
  start = time.perf_counter()
  for model_name in args.models.split(","):
    for batch, k in (tuple(map(int, c.split("x")))
                     for c in args.configs.split(",")):
      ms, memory, timed = _run_config(model_name, batch, k, args)
      for method in _methods(1, args.methods.split(",")):
        row = f"{model_name:<9} {batch:>4} {k:>2} {method:<17}"
        if method not in ms:
          print(f"{row} {'':<12} {'':>5} {'n/a':>8}")
          continue
        clips = "none" if method == NON_PRIVATE else (
            "per-example" if method.startswith("tan_tune") or k == 1
            else "per-copy")
        print(f"{row} {clips:<12} {timed:>5} {ms[method]:8.0f}"
              f" {ms[method] / ms[NON_PRIVATE]:7.2f}"
              f" {memory[method] / memory[NON_PRIVATE]:6.2f}", flush=True)
  print(f"load average at end: {os.getloadavg()[0]:.2f};"
        f" total {(time.perf_counter() - start) / 60:.1f} min")


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument(
      "--device", choices=("cpu", "cuda"),
      default="cuda" if torch.cuda.is_available() else "cpu")
  parser.add_argument("--warmup", type=int, default=2)
  parser.add_argument("--repeats", type=int, default=5)
  parser.add_argument("--budget", type=float, default=30.0,
                      help="seconds of timed steps after which to stop early")
  parser.add_argument("--models", default="wrn-16-4,dp-cnn",
                      help=f"comma-separated, of {sorted(IMAGE_SHAPES)}")
  parser.add_argument("--configs", default=",".join(
      f"{b}x{k}" for b, k in CONFIGS), help="comma-separated BxK")
  parser.add_argument("--methods", default=",".join(DP_METHODS),
                      help="comma-separated, of "
                      + ", ".join(DP_METHODS + JL_METHODS)
                      + "; the non-private step always runs")
  parser.add_argument("--worker", nargs=4, metavar=("METHOD", "MODEL", "B", "K"),
                      help="internal: steps one method on request")
  parser.add_argument("--smoke", action="store_true",
                      help="the CNN at B = 8, K = 1 and 2, one warm-up and one"
                      " timed step: a check that it runs")
  args = parser.parse_args()
  if args.smoke:
    # K = 2 as well: Opacus' per-copy rows and ghost's n/a.
    args.models, args.configs = "dp-cnn", "8x1,8x2"
    args.warmup, args.repeats = 1, 1
  if args.worker:
    method, model_name, batch, k = args.worker
    _worker(method, model_name, int(batch), int(k), torch.device(args.device))
  else:
    _table(args)


if __name__ == "__main__":
  main()
