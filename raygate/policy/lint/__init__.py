"""``raygate check``'s rules: a RayCluster's configuration (``rules``, RG0xx; those about
GPU nodes in ``gpu``, the scale gates in ``scale_gates``), the manifest itself
(``manifest``, RG1xx), and what both read and say (``model``)."""
