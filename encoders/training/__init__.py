"""Training commands for the encoders' small trained parts (`propdex train ...`).

What is trained here is small (heads, adapters) and saved as safetensors with
a config that records the command line, the data (with sha256) and the
hardware, next to the weights under `encoders/weights/`.
"""
