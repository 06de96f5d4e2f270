# Install rules, the CMake package (hkConfig.cmake, hkConfigVersion.cmake,
# the exported targets hk::hk and hk::hk_static) and pkg-config's hk.pc.
# Included by the top-level CMakeLists.txt when HK_INSTALL is on.
#
# Layout under the prefix (GNUInstallDirs):
#   include/hk/hk.h
#   <libdir>/libhk.so -> libhk.so.0 -> libhk.so.0.1.0, libhk.a,
#   <libdir>/libhk_mpi.so (when MPI was found; loaded at run time), and
#   <libdir>/libhk_cuda.so when a target hk_cuda exists (HK_CUDA)
#   <libdir>/cmake/hk/{hkConfig,hkConfigVersion,hkTargets,hkStaticTargets}.cmake
#   <libdir>/pkgconfig/hk.pc
#   bin/hkrun, bin/hktopo, bin/hkplan, bin/hkbench
#   share/hk/configs/*.xml, share/hk/models/*.tsv
#   <HK_INSTALL_PYTHONDIR>/hk: the Python package (python/hk), with
#   hk/_installed.py saying where libhk.so is relative to it
# Nothing installed carries an RPATH: hkrun, hktopo and hkbench do not
# link libhk.so, and libhk.so finds libhk_mpi.so in its own folder.
include(CMakePackageConfigHelpers)

set(HK_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/hk)

install(FILES ${PROJECT_SOURCE_DIR}/include/hk/hk.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/hk COMPONENT dev)
install(TARGETS hk EXPORT hkTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime
                NAMELINK_COMPONENT dev
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS hk_static EXPORT hkStaticTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# the separately loaded modules, next to libhk.so (where it looks first)
foreach(module hk_mpi hk_cuda)
  if(TARGET ${module})
    install(TARGETS ${module} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
            COMPONENT runtime)
  endif()
endforeach()
install(TARGETS hkrun hktopo hkplan RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        COMPONENT runtime)
if(TARGET hkbench)
  install(TARGETS hkbench RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
          COMPONENT runtime)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/bench/models/
          DESTINATION ${CMAKE_INSTALL_DATADIR}/hk/models COMPONENT runtime
          FILES_MATCHING PATTERN "*.tsv" PATTERN "README.md")
endif()
install(DIRECTORY ${PROJECT_SOURCE_DIR}/configs/
        DESTINATION ${CMAKE_INSTALL_DATADIR}/hk/configs COMPONENT runtime)

# The Python package, into the prefix's Python path in Debian's layout
# (/usr/bin/python3 searches /usr/lib/python3/dist-packages; any other
# prefix: PYTHONPATH=<prefix>/lib/python3/dist-packages). It finds this
# libhk.so through hk/_installed.py: the path from the package to the
# libdir, relative, so that the prefix given to cmake --install holds.
set(HK_INSTALL_PYTHONDIR "lib/python3/dist-packages" CACHE STRING
    "where cmake --install puts the Python package hk, under the prefix")
install(DIRECTORY ${PROJECT_SOURCE_DIR}/python/hk
        DESTINATION ${HK_INSTALL_PYTHONDIR} COMPONENT runtime
        PATTERN "__pycache__" EXCLUDE PATTERN "*.so" EXCLUDE)
file(RELATIVE_PATH HK_PY_TO_LIB /p/${HK_INSTALL_PYTHONDIR}/hk
     /p/${CMAKE_INSTALL_LIBDIR})
file(WRITE ${PROJECT_BINARY_DIR}/hk_installed.py
     "# written by cmake --install (cmake/hkInstall.cmake)\n"
     "LIBDIR = \"${HK_PY_TO_LIB}\"  # from this package to libhk.so\n")
install(FILES ${PROJECT_BINARY_DIR}/hk_installed.py
        DESTINATION ${HK_INSTALL_PYTHONDIR}/hk RENAME _installed.py
        COMPONENT runtime)

install(EXPORT hkTargets NAMESPACE hk:: DESTINATION ${HK_CMAKE_DIR}
        COMPONENT dev)
install(EXPORT hkStaticTargets NAMESPACE hk:: DESTINATION ${HK_CMAKE_DIR}
        COMPONENT dev)
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/hkConfig.cmake.in
  ${PROJECT_BINARY_DIR}/hkConfig.cmake INSTALL_DESTINATION ${HK_CMAKE_DIR}
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR)
# 0.x: a minor version may change the API, so find_package(hk 0.1) takes
# 0.1.* only; from 1.0 on, SameMajorVersion.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/hkConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/hkConfig.cmake
              ${PROJECT_BINARY_DIR}/hkConfigVersion.cmake
        DESTINATION ${HK_CMAKE_DIR} COMPONENT dev)

# pkg-config: hk.pc. Libs.private / Requires.private are what a static
# link (pkg-config --static) needs beside libhk.a.
if(IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(HK_PC_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
else()
  set(HK_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(HK_PC_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
else()
  set(HK_PC_LIBDIR "\${exec_prefix}/${CMAKE_INSTALL_LIBDIR}")
endif()
file(RELATIVE_PATH HK_PC_PREFIX_REL ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig
     ${CMAKE_INSTALL_PREFIX})
string(REGEX REPLACE "/$" "" HK_PC_PREFIX_REL "${HK_PC_PREFIX_REL}")
configure_file(${CMAKE_CURRENT_LIST_DIR}/hk.pc.in ${PROJECT_BINARY_DIR}/hk.pc
               @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/hk.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)
