"""The files in cluster/ are usable as they are: schemas, GPUs, bindings."""

import configparser
import pathlib

import pytest
from ray.autoscaler._private.util import prepare_config
from ray.autoscaler._private.util import validate_config
import yaml

CLUSTER = pathlib.Path(__file__).resolve().parents[2] / "cluster"
LAUNCHER_CONFIGS = ["aws.yaml", "gcp.yaml"]
KUBERAY = sorted((CLUSTER / "kuberay").glob("*.yaml"))


@pytest.mark.parametrize("name", LAUNCHER_CONFIGS)
def test_launcher_configs_validate_against_rays_schema(name):
  config = prepare_config(yaml.safe_load((CLUSTER / name).read_text()))
  validate_config(config)  # Ray's ray-schema.json, offline.
  nodes = config["available_node_types"]
  head = nodes[config["head_node_type"]]
  assert head["resources"] == {"CPU": 0}  # The driver only.
  workers = [n for k, n in nodes.items() if k != config["head_node_type"]]
  assert workers and all(n["resources"]["GPU"] >= 1 for n in workers)
  assert all(n["min_workers"] == 0 for n in workers)  # Scale from 0.
  assert "--dashboard-host=127.0.0.1" in " ".join(
      config["head_start_ray_commands"])


def test_the_schema_check_is_real():
  config = prepare_config(yaml.safe_load((CLUSTER / "aws.yaml").read_text()))
  config["avaliable_node_types"] = config.pop("available_node_types")
  with pytest.raises(Exception):
    validate_config(config)


def _gpus(pod_template):
  limits = [c.get("resources", {}).get("limits", {})
            for c in pod_template["spec"]["containers"]]
  return sum(int(limit.get("nvidia.com/gpu", 0)) for limit in limits)


def _ray_cluster_spec(document):
  if document["kind"] == "RayCluster":
    return document["spec"]
  return document["spec"]["rayClusterSpec"]


@pytest.mark.parametrize("path", KUBERAY, ids=lambda p: p.name)
def test_kuberay_manifests_parse_and_ask_for_gpus_on_workers_only(path):
  documents = [d for d in yaml.safe_load_all(path.read_text()) if d]
  clusters = [d for d in documents if d["kind"] in ("RayCluster", "RayJob")]
  assert clusters
  for document in clusters:
    assert document["apiVersion"] == "ray.io/v1"
    spec = _ray_cluster_spec(document)
    assert spec["rayVersion"] == "2.60.0"
    assert spec["authOptions"]["mode"] == "token"
    head = spec["headGroupSpec"]
    assert _gpus(head["template"]) == 0
    assert head["rayStartParams"]["num-cpus"] == "0"
    for group in spec["workerGroupSpecs"]:
      assert _gpus(group["template"]) >= 1, group["groupName"]
    if document["kind"] == "RayJob":
      assert document["spec"]["entrypoint"].startswith("tan-tune ")


@pytest.mark.parametrize("path", KUBERAY, ids=lambda p: p.name)
def test_every_driver_reads_the_teams_key_and_login_and_no_worker_does(path):
  """A RayJob after a RayJob charges the same ledger: every head (where the
  driver runs) mounts the team's key, group-readable, and logs in."""
  documents = [d for d in yaml.safe_load_all(path.read_text()) if d]
  for document in documents:
    if document["kind"] not in ("RayCluster", "RayJob"):
      continue
    spec = _ray_cluster_spec(document)
    pod = spec["headGroupSpec"]["template"]["spec"]
    [head] = pod["containers"]
    env = {item["name"]: item for item in head["env"]}
    [key_volume] = [v for v in pod["volumes"] if v["name"] == "ledger-key"]
    assert key_volume["secret"] == {"secretName": "tan-tune-ledger-key",
                                    "defaultMode": 0o440}
    [mount] = [m for m in head["volumeMounts"] if m["name"] == "ledger-key"]
    assert env["TAN_TUNE_LEDGER_KEY_FILE"]["value"] == (
        f"{mount['mountPath']}/key") and mount["readOnly"]
    for name in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):
      assert env[name]["valueFrom"]["secretKeyRef"]["name"] == (
          "tan-tune-mlflow-login")
    for group in spec["workerGroupSpecs"]:
      assert "ledger-key" not in str(group["template"])


@pytest.mark.parametrize("name", LAUNCHER_CONFIGS)
def test_launcher_configs_bring_the_teams_key_owner_only(name):
  config = yaml.safe_load((CLUSTER / name).read_text())
  key = "~/.config/tan_tune/team-ledger.key"
  assert config["file_mounts"][key] == key
  commands = " ".join(config["setup_commands"])
  assert f"chmod 600 {key}" in commands
  assert "TAN_TUNE_LEDGER_KEY_FILE=$HOME/.config/tan_tune/team-ledger.key" in (
      commands)


def test_kuberay_covers_search_and_promote():
  names = {p.name for p in KUBERAY}
  assert {"raycluster.yaml", "rayjob-search.yaml",
          "rayjob-promote.yaml"} <= names


def test_mlflow_recipe_uses_postgres_and_an_artifact_store_on_localhost():
  compose = yaml.safe_load(
      (CLUSTER / "mlflow" / "docker-compose.yaml").read_text())
  services = compose["services"]
  command = services["mlflow"]["command"]
  assert "--backend-store-uri postgresql+psycopg://" in command
  assert "--artifacts-destination s3://" in command
  assert services["postgres"]["image"].startswith("postgres:")
  for name, service in services.items():
    for port in service.get("ports", []):
      assert port.startswith(("127.0.0.1:", "${MLFLOW_BIND:-127.0.0.1}:")), (
          name, port)


def _mounted(service, target):
  """The file of cluster/mlflow/ that `service` mounts read-only at
  `target`."""
  [source] = [volume.split(":")[0] for volume in service["volumes"]
              if volume.endswith(f":{target}:ro")]
  return CLUSTER / "mlflow" / source


def test_mlflow_recipe_logs_users_in_and_keeps_them_in_postgres():
  """As tests/team_server.py runs it (that file reads the same
  basic_auth.ini)."""
  services = yaml.safe_load(
      (CLUSTER / "mlflow" / "docker-compose.yaml").read_text())["services"]
  mlflow = services["mlflow"]
  assert "mlflow server --app-name basic-auth " in mlflow["command"]
  assert "mlflow[auth]" in mlflow["command"]  # Flask-WTF, which it needs.
  environment = mlflow["environment"]
  for secret in ("MLFLOW_AUTH_ADMIN_PASSWORD", "MLFLOW_FLASK_SERVER_SECRET_KEY",
                 "PGPASSWORD"):
    assert environment[secret].startswith("${"), secret  # From .env.
  config = configparser.ConfigParser()
  config.read_string(_mounted(
      mlflow, environment["MLFLOW_AUTH_CONFIG_PATH"]).read_text())
  auth = config["mlflow"]
  assert auth["database_uri"].startswith("postgresql+psycopg://mlflow@postgres:")
  assert auth["default_permission"] == "EDIT"  # The team's shared ledger.
  assert "admin_password" not in auth
  database = auth["database_uri"].rsplit("/", 1)[1]
  init = _mounted(services["postgres"], "/docker-entrypoint-initdb.d/"
                  "create-auth-db.sql")
  assert f"CREATE DATABASE {database};" in init.read_text()
