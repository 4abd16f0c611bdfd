"""The served model's loader for a factory's network torch.export cannot
trace: it travels inside the MLflow Model with the factory's own code.

MLflow puts the model's `code/` folder (the factory's package or module,
its Python files only) on sys.path; this file imports mlflow, numpy, torch
and that code, never tan_tune. It rebuilds the network with the factory's
keyword arguments, loads the headline weights and applies the declared
normalisation and a softmax, as `served_model.Classifier` does.
"""

import importlib
import json

import mlflow.models
import mlflow.pyfunc
import numpy as np
import torch


class FactoryClassifier(mlflow.pyfunc.PythonModel):
  """Raw inputs (the dataset's float32 tensors) to class probabilities."""

  def load_context(self, context):
    with open(context.artifacts["factory"], encoding="utf-8") as spec_file:
      spec = json.load(spec_file)
    module, name = spec["factory"].split(":")
    self.network = getattr(importlib.import_module(module), name)(
        **spec["kwargs"])
    self.network.load_state_dict(torch.load(context.artifacts["weights"]))
    self.network.eval()
    # Per channel for images, else per feature on the last axis.
    shape = (-1, 1, 1) if len(spec["shape"]) == 3 else (-1,)
    self.mean = torch.tensor(spec["mean"]).view(shape)
    self.std = torch.tensor(spec["std"]).view(shape)

  def predict(self, context, model_input, params=None):
    del context, params
    inputs = torch.as_tensor(np.asarray(model_input, dtype=np.float32))
    with torch.no_grad():
      logits = self.network((inputs - self.mean) / self.std)
      return torch.softmax(logits, dim=1).numpy()


mlflow.models.set_model(FactoryClassifier())
