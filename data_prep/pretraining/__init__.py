"""Pre-training data: instances and masking, their records and dataset, and the
Apache Beam corpus pipeline (its command line is data_prep/pretraining_pipeline.py;
data_prep/create_pretraining_data.py is the original release's command line)."""
