"""Serving: the TF Serving-compatible server and deploy files."""
