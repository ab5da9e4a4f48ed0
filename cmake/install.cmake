# Install, package and the CMake package config (issue 18).
#   cmake --install BUILD [--prefix P]   bin/ckpt, bin/ckpt-gpu; share/ckptkit/schemas/;
#                                        share/man/man1/ckpt*.1 (generated from --help);
#                                        share/bash-completion/completions/ckpt{,-gpu};
#                                        the library for C++ users: include/ckptkit/,
#                                        lib/ckptkit/libconvert.a, lib/cmake/ckptkit/
#   cpack -G DEB (in BUILD)              ckptkit_VERSION_ARCH.deb with Debian 12 dependencies
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# --- the binaries ---------------------------------------------------------------------
# Installed binaries use the system's libraries (no $ORIGIN/lib: that is the GPU bundle's).
set_target_properties(ckpt ckpt-gpu PROPERTIES INSTALL_RPATH "")
install(TARGETS ckpt ckpt-gpu RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# --- data ------------------------------------------------------------------------------
install(DIRECTORY ${CMAKE_SOURCE_DIR}/schemas/ DESTINATION ${CMAKE_INSTALL_DATADIR}/ckptkit/schemas
        FILES_MATCHING PATTERN "*.json")

# --- man pages and bash completion, generated from the built binaries' --help ------------
# tools/cli_docs.py runs `ckpt --help`, `ckpt SUB --help` for every subcommand the help
# lists, and the same for ckpt-gpu, so the pages cannot drift from the options.
option(CKPT_MAN "Generate man pages and bash completion from --help (needs python3)" ON)
find_package(Python3 COMPONENTS Interpreter QUIET)
if(CKPT_MAN AND Python3_Interpreter_FOUND AND NOT CKPT_FUZZ AND NOT CKPT_SANITIZE)
  set(CKPT_MAN_DIR ${CMAKE_BINARY_DIR}/man/man1)
  set(CKPT_COMPLETION_DIR ${CMAKE_BINARY_DIR}/completion)
  set(CKPT_CLI_DOCS_STAMP ${CMAKE_BINARY_DIR}/man/cli_docs.stamp)
  add_custom_command(
    OUTPUT ${CKPT_CLI_DOCS_STAMP}
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tools/cli_docs.py man --version ${PROJECT_VERSION}
            --out ${CKPT_MAN_DIR} $<TARGET_FILE:ckpt> $<TARGET_FILE:ckpt-gpu>
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tools/cli_docs.py completion
            --out ${CKPT_COMPLETION_DIR} $<TARGET_FILE:ckpt> $<TARGET_FILE:ckpt-gpu>
    COMMAND ${CMAKE_COMMAND} -E touch ${CKPT_CLI_DOCS_STAMP}
    DEPENDS ckpt ckpt-gpu ${CMAKE_SOURCE_DIR}/tools/cli_docs.py
    COMMENT "Generating man pages and bash completion from --help")
  add_custom_target(ckpt_cli_docs ALL DEPENDS ${CKPT_CLI_DOCS_STAMP})
  install(DIRECTORY ${CKPT_MAN_DIR}/ DESTINATION ${CMAKE_INSTALL_MANDIR}/man1 FILES_MATCHING PATTERN "*.1")
  install(DIRECTORY ${CKPT_COMPLETION_DIR}/ DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions)
elseif(CKPT_MAN AND NOT CKPT_FUZZ AND NOT CKPT_SANITIZE)
  message(WARNING "python3 not found: no man pages or bash completion are generated or installed")
endif()

# --- the library for C++ users: find_package(ckptkit) -> ckptkit::convert ------------------
set(CKPT_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/ckptkit)
set_target_properties(libconvert PROPERTIES EXPORT_NAME convert)
add_library(ckptkit::convert ALIAS libconvert)
install(DIRECTORY ${CMAKE_SOURCE_DIR}/libconvert/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ckptkit
        FILES_MATCHING PATTERN "*.h")
install(TARGETS libconvert EXPORT ckptkitTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}/ckptkit
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ckptkit)
install(EXPORT ckptkitTargets NAMESPACE ckptkit:: DESTINATION ${CKPT_INSTALL_CMAKEDIR})
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/ckptkitConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/ckptkitConfig.cmake INSTALL_DESTINATION ${CKPT_INSTALL_CMAKEDIR})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/ckptkitConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/ckptkitConfig.cmake ${CMAKE_BINARY_DIR}/ckptkitConfigVersion.cmake
        DESTINATION ${CKPT_INSTALL_CMAKEDIR})

# --- the Debian package ------------------------------------------------------------------
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME ckptkit)
set(CPACK_PACKAGE_VENDOR "ckptkit")
set(CPACK_PACKAGE_CONTACT "ckptkit maintainers <ckptkit@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "validate, convert and verify LLM checkpoints (safetensors, GGUF)")
set(CPACK_PACKAGE_DESCRIPTION "ckpt checks checkpoints of large mixture-of-experts models before an engine loads them,
converts them exactly (FP8/MXFP4 to BF16, INT8-shift experts, GGUF expert packs), hashes
and diffs them; ckpt-gpu proves the device decode against the CPU reference bit for bit.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION utils)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# The run-time libraries of Debian 12 (bookworm), by package: libtbb.so.12, libsimdjson.so.14,
# libcrypto.so.3, libxxhash.so.0 (`dpkg -S` of each); ckpt-gpu with the HIP backend also
# loads libamdhip64.so.5. The CUDA backend links cudart statically (the driver is loaded at
# run time, and its absence is exit 4).
set(CKPT_DEB_DEPENDS "libc6 (>= 2.36), libstdc++6 (>= 12), libgcc-s1, libtbb12, libsimdjson14, libssl3, libxxhash0")
if(CKPT_BACKEND STREQUAL "hip")
  string(APPEND CKPT_DEB_DEPENDS ", libamdhip64-5")
endif()
set(CPACK_DEBIAN_PACKAGE_DEPENDS "${CKPT_DEB_DEPENDS}")
# The headers, libconvert.a and the CMake config need the -dev packages to be used.
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "libsimdjson-dev, libssl-dev, libtbb-dev, libxxhash-dev, pkg-config, cmake")
include(CPack)
