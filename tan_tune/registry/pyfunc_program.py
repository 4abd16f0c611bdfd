"""The served model's own code: it travels inside the MLflow Model.

MLflow loads this file from the model's folder ("models from code"), so it
imports mlflow, numpy and torch only, never tan_tune: a fresh environment
with those three loads and serves the model. The network, its normalisation
and its softmax are one `torch.export` program, the artifact `program`.
"""

import mlflow.models
import mlflow.pyfunc
import numpy as np
import torch


class PrivateClassifier(mlflow.pyfunc.PythonModel):
  """Raw inputs (the dataset's float32 tensors) to class probabilities."""

  def load_context(self, context):
    self.program = torch.export.load(context.artifacts["program"]).module()

  def predict(self, context, model_input, params=None):
    del context, params  # Everything is in the program.
    inputs = torch.as_tensor(np.asarray(model_input, dtype=np.float32))
    with torch.no_grad():
      return self.program(inputs).numpy()


mlflow.models.set_model(PrivateClassifier())
