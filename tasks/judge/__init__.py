"""The VLM judge: yes/no questions about each selected pair asked to an open-weight vision-language model, the verdict
from thresholds applied after the cache, and its agreement with the human validation."""
