"""Curated TFDV schemas, one folder per bundled dataset."""
