"""The wire contract of the live runtime: topics, message types, msgpack codec.

Empty until the live runtime lands (issue 4); it exists now so the dependency
contracts in ``pyproject.toml`` (broker imports nothing of the project) are
checked from the first commit.
"""
