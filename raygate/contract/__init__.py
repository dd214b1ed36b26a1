"""The floor raygate's client and server share, and import nothing else of raygate from:
the exception tree and how an error travels (HTTP status, gRPC code), the admission-status
types, the generated ``raygate.v1`` protobuf code, and the errors a command refuses with
(``command``, which the policy too may import: it imports nothing)."""
