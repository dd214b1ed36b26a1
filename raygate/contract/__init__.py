"""The floor raygate's client and server share, and import nothing else of raygate from:
the exception tree and how an error travels (HTTP status, gRPC code), the admission-status
types, the generated ``raygate.v1`` protobuf code, the log format and the version."""
