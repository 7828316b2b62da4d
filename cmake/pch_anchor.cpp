// Anchors the precompiled CAF headers (see messages/CMakeLists.txt).
