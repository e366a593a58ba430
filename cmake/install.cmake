# `cmake --install build --prefix P`: the public headers, libhmcast (shared, with its
# SONAME, and static), the hmcast tool, libhmcast_mpi.so, the CMake package
# (find_package(hmcast)) and hmcast.pc. The headers under src/ stay private.
include(CMakePackageConfigHelpers)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/hmcast DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS hmcast hmcast_shared EXPORT hmcastTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(EXPORT hmcastTargets NAMESPACE hmcast:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/hmcast)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/hmcastConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/hmcastConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/hmcast)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/hmcastConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)  # 0.x: minor releases may break the API
install(FILES ${PROJECT_BINARY_DIR}/hmcastConfig.cmake ${PROJECT_BINARY_DIR}/hmcastConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/hmcast)
set(HMCAST_PC_PRIVATE_LIBS "")
if(HMCAST_VERBS)
  set(HMCAST_PC_PRIVATE_LIBS "-lrdmacm -libverbs")
endif()
if(HMCAST_ZOOKEEPER)
  string(APPEND HMCAST_PC_PRIVATE_LIBS " -lzookeeper_mt")
endif()
string(APPEND HMCAST_PC_PRIVATE_LIBS " -lsodium")
file(RELATIVE_PATH HMCAST_PC_UP /p/${CMAKE_INSTALL_LIBDIR}/pkgconfig /p)
configure_file(${PROJECT_SOURCE_DIR}/cmake/hmcast.pc.in ${PROJECT_BINARY_DIR}/hmcast.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/hmcast.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
if(TARGET hmcast_cli)
  install(TARGETS hmcast_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
if(TARGET hmcast_mpi)
  install(TARGETS hmcast_mpi LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()
