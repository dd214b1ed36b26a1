"""Everything of raygate that touches the outside: servers, wire codecs, the cluster cache,
CLI and settings. Imports ``raygate.plugin``; ``raygate.plugin`` never imports this."""
