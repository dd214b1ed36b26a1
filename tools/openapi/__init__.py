"""The parts of ``raygate/server/openapi.json`` made from code, which
``tools/openapi_document.py`` puts together: ``schema`` (the words every part uses),
``decoded`` (the objects raygate decodes, from its wire structs), ``replies`` (raygate's
own replies and the webhook's review), ``schedulers`` (kube-scheduler's and Volcano's
envelopes and results), ``paths`` (the operations)."""
