-- Billing: platform-trusted device health history (for "GPUs healthy at the start of each
-- window") and each reservation's billing watermark.

CREATE TABLE device_health (
    node_id      TEXT NOT NULL,
    generation   BIGINT NOT NULL,
    at           BIGINT NOT NULL,
    gpus_healthy BIGINT NOT NULL,
    PRIMARY KEY (node_id, generation)
);

ALTER TABLE reservations ADD COLUMN billed_until BIGINT;
