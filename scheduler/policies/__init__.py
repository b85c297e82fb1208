"""Scheduling policies, one module each, named after the policy (see ``registry``)."""
