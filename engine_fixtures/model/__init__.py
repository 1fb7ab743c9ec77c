"""Model directories SGLang serves without a download: published shapes, Qwen's tokenizer, the writer and checker.

``python -m engine_fixtures.model.modeldir --shape tiny OUT`` writes one.
"""
