"""The HTTP layer: routes, the ASGI app, and the scheduler's verbs answered inside the
protocol. It knows no protocol front and no metrics library."""
