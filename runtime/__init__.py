"""Glue below the stages: the model registry (MLflow) and the local services (broker, MLflow
server, child processes) that stages and the orchestrator share. Imports no stage at module top.
"""
