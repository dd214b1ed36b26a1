"""The cluster as raygate holds it: immutable snapshots, wire objects to the policy's
views, snapshot files."""
