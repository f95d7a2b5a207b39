"""The MFU check (GPU only): timing the submission's training against the reference."""
