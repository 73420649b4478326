"""Decisions online: a stream of tasks arriving on a replayed link trace, each offloaded or not by a
policy (static, or online from the predictor at its bandwidth estimate)."""
