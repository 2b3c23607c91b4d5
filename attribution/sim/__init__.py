"""The simulator: workloads, true board power, NVML sensor models; ground truth by construction."""
