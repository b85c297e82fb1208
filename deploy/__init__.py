"""Deployment configuration: Prometheus, Grafana and the testbed's files."""
