"""The MLflow Model of a private run's weights, on a small hand-built run."""

import json
import subprocess
import sys

import mlflow.pyfunc
import numpy as np
import pytest
import torch
import yaml

from tan_tune.registry import served_model
from tan_tune.training import models

_INPUTS = served_model.Inputs(shape=(1, 8, 8), num_classes=10, mean=(0.5,),
                              std=(0.5,))
_CONFIG = models.ModelConfig(name="small-cnn")
_STARTED = 1_700_000_000.0  # The run's start: 2023-11-14 22:13:20 UTC.


def _state() -> dict:
  """A saved run's dict: raw weights, and an EMA unlike them."""
  torch.manual_seed(0)
  model = models.build_model(_CONFIG, _INPUTS.shape, _INPUTS.num_classes)
  ema = {name: p.detach() + 0.05 for name, p in model.named_parameters()}
  return {"model": model.state_dict(), "ema": ema}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
  """The EMA weights as an MLflow Model, the classifier it holds, and the
  names of the files it was saved as."""
  network = served_model.network(_CONFIG, _INPUTS, _state(), "ema")
  classifier = served_model.Classifier(network, _INPUTS)
  folder = served_model.save(tmp_path_factory.mktemp("model"), classifier,
                             _INPUTS, _STARTED, {"privacy": {"epsilon": 2}})
  # Listed now: a test that loads the model may cache bytecode beside it.
  files = sorted(p.name for p in folder.rglob("*") if p.is_file())
  return folder, classifier, files


def test_headline_weights_are_those_of_the_metric():
  assert served_model.headline_weights("ema_accuracy", True) == "ema"
  assert served_model.headline_weights("augtest_accuracy", True) == "ema"
  assert served_model.headline_weights("accuracy", True) == "model"
  assert served_model.headline_weights("ema_accuracy", False) == "model"


def test_the_ema_replaces_parameters_and_keeps_buffers():
  state = _state()
  raw = served_model.network(_CONFIG, _INPUTS, state, "model")
  ema = served_model.network(_CONFIG, _INPUTS, state, "ema")
  assert not ema.training
  for (name, p), q in zip(raw.named_parameters(), ema.parameters()):
    torch.testing.assert_close(q, p + 0.05, msg=name)


def test_the_classifier_normalises_raw_inputs_into_probabilities():
  network = served_model.network(_CONFIG, _INPUTS, _state(), "model")
  raw = torch.rand(4, *_INPUTS.shape)
  probabilities = served_model.Classifier(network, _INPUTS)(raw)
  torch.testing.assert_close(probabilities.sum(1), torch.ones(4))
  torch.testing.assert_close(probabilities.argmax(1),
                             network((raw - 0.5) / 0.5).argmax(1))


def test_the_model_loads_with_mlflow_and_predicts_like_the_run(saved):
  folder, classifier, _ = saved
  loaded = mlflow.pyfunc.load_model(str(folder))
  raw = torch.rand(5, *_INPUTS.shape)
  predicted = loaded.predict(raw.numpy())
  assert predicted.shape == (5, _INPUTS.num_classes)
  np.testing.assert_allclose(predicted, classifier(raw).detach().numpy(),
                             atol=1e-6)


def test_signature_is_raw_tensors_and_the_example_is_zeros(saved):
  folder, _, _ = saved
  spec = yaml.safe_load((folder / "MLmodel").read_text())
  [inputs] = json.loads(spec["signature"]["inputs"])
  assert inputs["tensor-spec"] == {"dtype": "float32",
                                   "shape": [-1, 1, 8, 8]}
  [outputs] = json.loads(spec["signature"]["outputs"])
  assert outputs["tensor-spec"]["shape"] == [-1, 10]
  example = np.array(json.loads((folder / "input_example.json").read_text()))
  assert example.shape == (1, 1, 8, 8) and not example.any()


def test_it_is_dated_at_the_runs_start_and_carries_its_metadata(saved):
  folder, _, saved_files = saved
  spec = yaml.safe_load((folder / "MLmodel").read_text())
  assert spec["utc_time_created"] == "2023-11-14 22:13:20.000000"
  assert spec["metadata"] == {"privacy": {"epsilon": 2}}
  # Whether or not the environment writes bytecode: no __pycache__.
  assert saved_files == sorted([
      "MLmodel", "conda.yaml", "python_env.yaml", "requirements.txt",
      "input_example.json", "serving_input_example.json",
      served_model.PROGRAM, served_model.LOADER.name])


def test_its_loader_imports_no_tan_tune():
  source = served_model.LOADER.read_text()
  assert "tan_tune" not in source.split('"""')[2]


_FACTORY = models.ModelConfig(factory="plugin_factories:chunked_mlp")


def test_a_factorys_network_that_cannot_export_is_named_in_the_plan():
  assert served_model.check_exportable(_CONFIG, _INPUTS) is None
  servable = served_model.Servable.plan(_FACTORY, _INPUTS, "accuracy", True)
  assert servable.export_failure.startswith(
      "torch.export cannot trace plugin_factories:chunked_mlp")
  assert servable.weights == "model"
  assert "with the factory's code (torch.export" in servable.describe()
  assert served_model.Servable.plan(_CONFIG, _INPUTS, "accuracy",
                                    True).export_failure is None


def test_a_factorys_network_travels_with_its_code(tmp_path):
  torch.manual_seed(0)
  network = models.build_model(_FACTORY, _INPUTS.shape, _INPUTS.num_classes)
  state = {"model": network.state_dict(), "ema": None}
  servable = served_model.Servable.plan(_FACTORY, _INPUTS, "accuracy", False)
  folder = served_model.save_weights(tmp_path, servable, _FACTORY, state,
                                     _STARTED, {})
  assert (folder / "code" / "plugin_factories.py").exists()
  raw = torch.rand(9, *_INPUTS.shape)  # Chunked by the network itself.
  expected = torch.softmax(network.eval()((raw - 0.5) / 0.5), 1)
  np.testing.assert_allclose(
      mlflow.pyfunc.load_model(str(folder)).predict(raw.numpy()),
      expected.detach().numpy(), atol=1e-6)


@pytest.mark.slow
def test_it_loads_in_a_process_without_tan_tune(saved, tmp_path):
  """A fresh interpreter without site's start-up (no .pth file, so no
  editable install of the package) whose sys.path is the standard library
  and site-packages alone: mlflow, torch and numpy, no tan_tune."""
  folder, classifier, _ = saved
  raw = torch.rand(3, *_INPUTS.shape)
  np.save(tmp_path / "raw.npy", raw.numpy())
  script = (
      "import sys\n"
      "sys.path.append(sys.argv[3])\n"
      "import importlib.util, mlflow.pyfunc, numpy as np\n"
      "assert importlib.util.find_spec('tan_tune') is None\n"
      "model = mlflow.pyfunc.load_model(sys.argv[1])\n"
      "np.save(sys.argv[2], model.predict(np.load(sys.argv[2])))\n"
      "assert not any(m.startswith('tan_tune') for m in sys.modules)\n")
  [packages] = [p for p in sys.path if p.endswith("site-packages")]
  subprocess.run([sys.executable, "-I", "-S", "-c", script, str(folder),
                  str(tmp_path / "raw.npy"), packages], check=True,
                 cwd=tmp_path)
  np.testing.assert_allclose(np.load(tmp_path / "raw.npy"),
                             classifier(raw).detach().numpy(), atol=1e-6)
