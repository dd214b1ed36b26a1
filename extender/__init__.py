"""Everything of raygate that touches the outside: servers, wire codecs, the cluster cache,
CLI and settings. Imports ``plugin``; ``plugin`` never imports this."""
