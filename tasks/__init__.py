"""Stage logic: plain functions over polars frames and a typed params object; models are loaded once and passed in."""
