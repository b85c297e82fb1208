"""The testbed's Grafana: its provisioning, and its dashboard written as code."""
