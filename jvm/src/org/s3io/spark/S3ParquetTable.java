package org.s3io.spark;

import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.execution.datasources.v2.python.PythonTable;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/** Spark's table of a Python source (capabilities, writes) with a scan builder that prunes and pushes. */
public class S3ParquetTable extends PythonTable {
  private final PythonDataSourceV2 source;
  private final String shortName;
  private final StructType schema;

  public S3ParquetTable(PythonDataSourceV2 source, String shortName, StructType schema) {
    super(source, shortName, schema);
    this.source = source;
    this.shortName = shortName;
    this.schema = schema;
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
    return new S3ParquetScanBuilder(source, shortName, schema, options);
  }
}
