# raygate: slim, non-root, pinned Python. `make image` builds it where Docker exists.
FROM python:3.11.7-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY raygate ./raygate
RUN python -m pip install --no-cache-dir --upgrade pip \
 && python -m pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11.7-slim-bookworm
COPY --from=build /wheels /wheels
RUN python -m pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
# 65532: the conventional "nonroot" user; the Deployment sets runAsNonRoot and a
# read-only root filesystem, so nothing is written outside /tmp (an emptyDir there).
USER 65532:65532
EXPOSE 8888 9090
ENTRYPOINT ["raygate"]
CMD ["serve", "--demo"]
