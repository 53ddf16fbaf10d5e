"""Consumer groups on the client side: the embedded consumer protocol, the assignors the
group leader runs, and the membership state machine that drives the coordinator RPCs."""
