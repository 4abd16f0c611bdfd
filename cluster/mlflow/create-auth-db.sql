-- The database of MLflow's users and grants (basic_auth.ini), made with the
-- runs' database on the volume's first start.
CREATE DATABASE mlflow_auth;
