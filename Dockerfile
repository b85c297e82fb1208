# The accordion image: the scheduler, the node agent and the CLI (compose.yaml
# runs every service of the testbed from it; see README "Docker compose testbed").
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
# Only what `pip install .` reads (pyproject.toml, README.md, the packages),
# plus examples/ (cluster.toml, demo.swf) for the `submit` tool.
COPY pyproject.toml README.md requirements.lock ./
COPY broker ./broker
COPY model ./model
COPY scheduler ./scheduler
COPY nodeagent ./nodeagent
COPY twin ./twin
COPY workload ./workload
COPY accordion ./accordion
# Reproducible: requirements.lock (the same pins scripts/setup installs) constrains
# every dependency, direct or not, to its locked version; the build then fails if
# anything got installed that the lock does not pin, so two builds a week apart
# install the same wheels.
# The dask extra: `accordion sweep --dask` and the compose profile's Dask workers.
RUN pip install -c requirements.lock '.[dask]' \
 && pip freeze --exclude-editable | grep -v '^accordion[=@ ]' | sort > /tmp/installed \
 && grep -v '^#' requirements.lock | sort > /tmp/locked \
 && unpinned=$(comm -23 /tmp/installed /tmp/locked) \
 && if [ -n "$unpinned" ]; then echo "not pinned by requirements.lock: $unpinned" >&2; exit 1; fi \
 && mkdir -p /opt/accordion \
 && rm -rf /src/build /src/*.egg-info /tmp/installed /tmp/locked
COPY examples /opt/accordion/examples

# An unprivileged user; /data (the scheduler's journal volume) is theirs, so
# a fresh named volume is created writable.
RUN useradd --create-home --uid 10001 --user-group accordion \
 && mkdir -p /data && chown accordion:accordion /data
USER accordion
WORKDIR /home/accordion
VOLUME ["/data"]
EXPOSE 9100 9101
CMD ["accordion", "--help"]
