"""SSD forward providers sharing mamba_ssm's `mamba_chunk_scan_combined` forward contract."""
