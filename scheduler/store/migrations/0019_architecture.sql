-- A node's architecture (issue 36), as its commissioning ramdisk reported it: x86_64 or
-- aarch64. Portable SQL, as in 0001. Nodes commissioned before it have none (x86_64: every
-- earlier ramdisk was).
ALTER TABLE nodes ADD COLUMN architecture TEXT;
