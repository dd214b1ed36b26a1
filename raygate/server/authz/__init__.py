"""Who may read raygate's own API: delegated authentication and authorization (TokenReview,
SubjectAccessReview), over HTTP and gRPC."""
