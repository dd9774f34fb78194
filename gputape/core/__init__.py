"""The tape machinery: tensors, the primitive registry, recording, dispatch, the tape, the backward.

See gputape/README.md for the layers."""
