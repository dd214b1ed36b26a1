# raygate's image (ghcr.io/raygate-dev/raygate; `make image` where Docker exists, and
# .github/workflows/release.yml for amd64 and arm64 on a tag): slim, non-root, and
# everything installed from requirements/*.txt with pip's --require-hashes.
#
# The base image. PYTHON_VERSION is also the Python requirements/lock.py resolves for.
# Not pinned by digest yet: the machines this repository is built on reach no container
# registry, so the digest of this tag could not be read, and none is written from
# memory. To pin it (and on every update of the tag, then rerun requirements/lock.py if
# the minor version changed):
#   docker buildx imagetools inspect python:3.11.7-slim-bookworm --format '{{json .Manifest.Digest}}'
# and set PYTHON_IMAGE below to python:<tag>@sha256:<that digest> (the index digest, which
# covers every architecture). The release workflow refuses to publish until it is pinned.
ARG PYTHON_VERSION=3.11.7
ARG PYTHON_IMAGE=python:${PYTHON_VERSION}-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY requirements/build.txt requirements/runtime.txt /requirements/
# The build backend from the lock, then raygate's wheel alone (its dependencies come from
# runtime.txt in the final stage, by hash).
RUN python -m pip install --no-cache-dir --require-hashes -r /requirements/build.txt
COPY pyproject.toml README.md LICENSE ./
COPY raygate ./raygate
RUN python -m pip wheel --no-cache-dir --no-build-isolation --no-deps --wheel-dir /wheels .

FROM ${PYTHON_IMAGE}
COPY --from=build /requirements/runtime.txt /requirements/runtime.txt
COPY --from=build /wheels /wheels
RUN python -m pip install --no-cache-dir --require-hashes -r /requirements/runtime.txt \
 && python -m pip install --no-cache-dir --no-deps /wheels/*.whl \
 && rm -rf /wheels /requirements \
 && raygate --help > /dev/null
# 65532: the conventional "nonroot" user; the Deployment sets runAsNonRoot and a
# read-only root filesystem, so nothing is written outside /tmp (an emptyDir there).
USER 65532:65532
EXPOSE 8888 9090
ENTRYPOINT ["raygate"]
CMD ["serve", "--demo"]
